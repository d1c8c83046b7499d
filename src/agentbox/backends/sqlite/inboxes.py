"""Every inbox file in one folder: what `run --watch --all-users` serves on SQLite.

The inbox of user U is ``U.sqlite3``. Each inbox is opened once and kept
open, so that ``PRAGMA data_version`` on its connection can tell another
process's commits from this process's own (three file descriptors per inbox;
the soft limit on open files is raised to the hard one for that). Files whose
name is not a valid user name are not inboxes and are left alone.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Collection
from pathlib import Path

from agentbox.backends.sqlite.engine import SqliteEngine
from agentbox.backends.sqlite.wake import POLL, Changes, data_version
from agentbox.errors import AgentboxError, BadInput, DatabaseError
from agentbox.ledger.store import Store
from agentbox.paths import check_user, private_dir

SUFFIX = ".sqlite3"
POLL_PER_INBOX = 0.002  # without inotify, each look reads every inbox: look less often


SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite keeps beside a database file


def user_of(file: str) -> str | None:
    """The user an inbox file (or its ``-wal``, ``-shm``, ``-journal``) belongs to.

    The side file's ending is taken off the end: a user's name may itself hold
    ``.sqlite3-`` (``a.sqlite3-b`` is a name), so the name is never cut there."""
    base = next((file[:-len(side)] for side in SIDE_FILES if file.endswith(SUFFIX + side)),
                file)
    if not base.endswith(SUFFIX):
        return None
    try:
        return check_user(base[:-len(SUFFIX)])
    except BadInput:
        return None


def _more_files() -> None:
    """Raise the soft limit on open files to the hard one: every inbox stays open."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class SqliteInboxes:
    """The :class:`~agentbox.ledger.inboxes.Inboxes` of one folder of SQLite inbox files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.location = str(folder)
        self._stores: dict[str, tuple[Store, SqliteEngine]] = {}
        self._failed: dict[str, str] = {}
        _more_files()

    def users(self) -> list[str]:
        try:
            names = os.listdir(self.folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted({user for name in names if name.endswith(SUFFIX)
                       and (user := user_of(name)) is not None})

    def store(self, user: str) -> Store:
        opened = self._stores.get(user)
        if opened is None:
            path = self.folder / f"{check_user(user)}{SUFFIX}"
            if not path.is_file():
                raise DatabaseError(f"{path}: no such inbox")
            engine = SqliteEngine(path, make_folders=False)
            opened = self._stores[user] = (Store(engine), engine)
        return opened[0]

    def next_work(self, now: int, users: Collection[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for user in users:
            try:
                due = self.store(user).next_work(now)
            except AgentboxError as exc:
                self._failed[user] = str(exc)
                self._forget(user)
                continue
            if due is not None:
                found[user] = due
        return found

    def failures(self) -> dict[str, str]:
        failed, self._failed = self._failed, {}
        return failed

    def _forget(self, user: str) -> None:
        opened = self._stores.pop(user, None)
        if opened is not None:
            opened[0].close()

    def _version(self, user: str) -> int | None:
        opened = self._stores.get(user)
        if opened is None:
            return None
        try:
            return data_version(opened[1].current())
        except sqlite3.Error:
            return None  # looked at again by next_work, which says what is wrong

    def waiter(self) -> FolderWaiter:
        private_dir(self.folder)  # watched before the first inbox is made
        return FolderWaiter(self)

    def close(self) -> None:
        for user in list(self._stores):
            self._forget(user)


class FolderWaiter:
    """The :class:`~agentbox.ledger.inboxes.InboxesWaiter` of a folder of inbox files."""

    def __init__(self, inboxes: SqliteInboxes) -> None:
        period = max(POLL, POLL_PER_INBOX * len(inboxes.users()))
        self.changes = Changes(inboxes.folder, user_of, inboxes.users, inboxes._version,
                               period)

    def wait(self, timeout: float) -> set[str] | None:
        return self.changes.wait(timeout)

    def close(self) -> None:
        self.changes.close()
