"""Where an inbox lives, and opening it on the engine its location names.

A location is a SQLite file (one user's inbox) or a ``postgresql://`` URL (every
user's inbox in one database). Which one a command means is decided here, in
this order: ``--db``, ``$AGENTBOX_DB``, the ``database`` setting, else the
user's own file under the data folder. Opening picks the backend: the ledger
(:mod:`agentbox.ledger`) never imports one, and a SQLite user never imports
psycopg.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentbox.ledger.engine import Engine
    from agentbox.ledger.inboxes import Inboxes
    from agentbox.ledger.store import Store

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
POSTGRES_EXTRA = "PostgreSQL needs the postgres extra, psycopg 3: pip install 'psycopg[binary]'"


def is_url(target: str | os.PathLike[str]) -> bool:
    """A PostgreSQL URL rather than a file path."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def named(db: str | os.PathLike[str] | None = None, user: str | None = None) -> str | None:
    """The inbox named by ``db``, else ``$AGENTBOX_DB``, else the ``database`` setting;
    None when none is, and the user's own file under the data folder is meant."""
    chosen = os.fspath(db) if db else os.environ.get("AGENTBOX_DB")
    if chosen:
        return chosen
    from agentbox import config, paths

    return config.resolve(paths.config_path(), paths.resolve_user(user)).database


def locate(db: str | os.PathLike[str] | None = None, user: str | None = None, *,
           make_folder: bool = True) -> str:
    """Where an inbox lives: :func:`named`, else the user's own file under the data
    folder (its folder made 0700 unless ``make_folder`` is false).

    A file path comes back absolute, so a handler or sender told about it finds
    the same inbox from any working directory. ``user`` is checked only when it
    is needed to find the file.
    """
    chosen = named(db, user)
    if not chosen:
        from agentbox import paths

        path = paths.inbox_path(paths.resolve_user(user))
        if make_folder:
            paths.private_dir(path.parent)
        return str(path)
    return chosen if is_url(chosen) else os.path.abspath(chosen)


def locate_inboxes(db: str | os.PathLike[str] | None = None) -> str:
    """Where every user's inbox lives, for a process serving them all: a PostgreSQL URL
    from ``db``, ``$AGENTBOX_DB`` or the top-level ``database`` setting, else the data
    folder's ``inboxes``. A single inbox file cannot stand for all users (UsageError)."""
    from agentbox import config, paths
    from agentbox.errors import UsageError

    chosen = (os.fspath(db) if db else os.environ.get("AGENTBOX_DB")
              or config.resolve(paths.config_path(), "").database)
    if not chosen:
        return str(paths.data_dir() / "inboxes")
    if is_url(chosen):
        return chosen
    raise UsageError(f"--all-users serves every inbox of the data folder or of a "
                     f"PostgreSQL database, and {chosen} is a single inbox file")


def open_engine(target: str | os.PathLike[str], user: str, *, durable: bool = True,
                make_folders: bool = False, busy_timeout: float | None = None,
                create: bool = True) -> Engine:
    """The engine of the inbox of ``user`` at ``target`` (see :func:`open_store`)."""
    if is_url(target):
        with _postgres_driver():
            from agentbox.backends.postgres.engine import PostgresEngine
        return PostgresEngine(str(target), user, durable=durable, create=create,
                              lock_timeout=busy_timeout)
    from agentbox.backends.sqlite.engine import SqliteEngine

    return SqliteEngine(target, durable=durable, make_folders=make_folders, create=create,
                        busy_timeout=busy_timeout)


def open_store(target: str | os.PathLike[str], user: str, *, durable: bool = True,
               make_folders: bool = False, busy_timeout: float | None = None,
               create: bool = True) -> Store:
    """Open the inbox of ``user`` at ``target``.

    For SQLite the file is the inbox (``user`` is not needed); a
    ``postgresql://`` URL names a database (and schema) holding every user's
    inbox. Without psycopg installed a URL is a usage error (exit 2) naming the
    extra to install; a SQLite user never imports it.

    ``durable`` (the default) makes every acknowledged write survive a crash or
    power loss; a scratch inbox turns it off. ``busy_timeout`` (seconds) bounds
    how long a write waits for the inbox's lock before
    :class:`~agentbox.errors.Busy`, for a caller that must answer sooner than
    the backend's own wait (a server whose clients give up). With ``create``
    false a missing inbox raises :class:`~agentbox.errors.NoInbox` and nothing
    is made: what a command that only reads needs.
    """
    from agentbox.ledger.store import Store

    return Store(open_engine(target, user, durable=durable, make_folders=make_folders,
                             busy_timeout=busy_timeout, create=create))


def open_inboxes(target: str | os.PathLike[str]) -> Inboxes:
    """Every inbox at ``target``: a folder of SQLite files, or a PostgreSQL URL."""
    if is_url(target):
        with _postgres_driver():
            from agentbox.backends.postgres.inboxes import PostgresInboxes
        return PostgresInboxes(str(target))
    from agentbox.backends.sqlite.inboxes import SqliteInboxes

    return SqliteInboxes(Path(target))


def empty_view(location: str) -> Store:
    """An empty inbox that refuses every write, for ``location`` where none exists: a
    command that only reads answers from it as from a new inbox (a PostgreSQL URL is
    shown without its password). It is held in memory, by SQLite's engine whatever
    the location: there is nothing to read, so no server need be reached."""
    from agentbox.backends.sqlite.engine import SqliteEngine
    from agentbox.ledger.store import Store

    if is_url(location):
        from agentbox.backends.postgres.url import parse

        location = parse(location).location
    return Store(SqliteEngine.empty(location))


@contextmanager
def _postgres_driver() -> Iterator[None]:
    """Imports of the PostgreSQL backend: a missing psycopg is one line naming the extra."""
    try:
        yield
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "psycopg":
            raise
        from agentbox.errors import UsageError

        raise UsageError(POSTGRES_EXTRA) from None


@contextmanager
def scratch_store(base: str | None = None, user: str = "scratch") -> Iterator[Store]:
    """A fresh, empty inbox that is removed afterwards, with durability off.

    By default a temporary SQLite file; given a PostgreSQL URL, a temporary
    schema in that database (which needs the right to create one). The
    scenario runner replays every scenario in one.
    """
    if base is not None and is_url(base):
        with _postgres_driver():
            from agentbox.backends.postgres.db import temporary_schema
        with (temporary_schema(base, "agentbox_scratch") as url,
              open_store(url, user, durable=False) as store):
            yield store
        return
    import tempfile

    with (tempfile.TemporaryDirectory(prefix="agentbox-scratch-") as folder,
          open_store(os.path.join(folder, "inbox.sqlite3"), user, durable=False) as store):
        yield store
