"""An SQLite inbox read straight from its tables: whole dumps and real counts."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Sequence
from pathlib import Path

from agentbox.ledger.store import Store
from agentbox.location import open_store
from agentbox.rules.records import EVENT_STATES, OUTBOX_STATES

Dump = dict[str, list[tuple[object, ...]]]


def sqlite_store(path: str | os.PathLike[str], *, durable: bool = True,
                 busy_timeout: float | None = None, make_folders: bool = True) -> Store:
    """The store of the inbox file ``path``, made (with its folders) if missing."""
    return open_store(path, "", durable=durable, busy_timeout=busy_timeout,
                      make_folders=make_folders)


def null_device(path: Path) -> Path:
    """A character device at ``path`` for a test to hand agentbox as an inbox: a node
    of its own reading as /dev/null where this process may make one (as root), else a
    link to /dev/null. Never the system's /dev/null itself to a root process: an
    agentbox that mistook it for an empty file of its own would make it private
    (0600), and every other user's programs would then fail to open it."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:  # not root: /dev/null is root's, so no chmod of ours can land
        path.symlink_to(os.devnull)
    return path


def dump(conn: sqlite3.Connection) -> Dump:
    """Every row of every table, so two dumps compare the whole database."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall()]
    return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr)
            for t in tables}


def real_counts(conn: sqlite3.Connection, table: str, column: str,
                states: Sequence[str]) -> dict[str, int]:
    """Counts by state from a real GROUP BY, zero included."""
    found = dict(conn.execute(
        f"SELECT {column}, COUNT(*) FROM {table} GROUP BY {column}").fetchall())
    assert set(found) <= set(states), found
    return {s: int(found.get(s, 0)) for s in states}


def assert_counts_true(store: Store) -> None:
    """The trigger-kept counts equal a GROUP BY over the rows themselves."""
    status = store.status()
    assert status.events == real_counts(store.engine.conn, "events", "status", EVENT_STATES)
    assert status.outbox == real_counts(store.engine.conn, "outbox", "state", OUTBOX_STATES)
