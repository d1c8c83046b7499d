"""Looking after one SQLite inbox file: its health, its size, freed pages, a copy."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from agentbox.backends.sqlite.schema import SCHEMA_VERSION
from agentbox.rules import health
from agentbox.rules.health import Check

SIDE_FILES = ("-wal", "-shm")


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def disk_bytes(location: str) -> int:
    """The file and its write-ahead log: what the inbox takes on disk."""
    return _size(location) + _size(location + "-wal")


def _integrity(conn: sqlite3.Connection) -> Check:
    try:
        found = [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return Check("integrity", False, f"quick_check could not finish: {exc}")
    if found == ["ok"]:
        return Check("integrity", True, "quick_check found no damage")
    shown = "; ".join(found[:3]) + (f"; … ({len(found)} problems)" if len(found) > 3 else "")
    return Check("integrity", False, shown)


def _schema(conn: sqlite3.Connection) -> Check:
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        applied = [int(r[0]) for r in conn.execute(
            "SELECT version FROM migrations ORDER BY version").fetchall()]
    except sqlite3.DatabaseError as exc:
        return Check("schema", False, f"cannot read the schema version: {exc}")
    if version != SCHEMA_VERSION or applied != list(range(1, version + 1)):
        return Check("schema", False, f"version {version} with migrations {applied}; this "
                                      f"agentbox expects {SCHEMA_VERSION}")
    return Check("schema", True, f"version {version}, every migration recorded")


def _modes(location: str) -> list[tuple[str, int]]:
    """The modes of the inbox file, its side files and its folder (none if no file)."""
    if not os.path.exists(location):
        return []
    paths = [location, *(location + s for s in SIDE_FILES if os.path.exists(location + s)),
             os.path.dirname(os.path.abspath(location))]
    return [(p, os.stat(p).st_mode) for p in paths]


def checks(conn: sqlite3.Connection, location: str) -> list[Check]:
    """The file's own checks: integrity, schema version, permissions, WAL size."""
    return [_integrity(conn), _schema(conn), health.private(_modes(location)),
            health.journal(_size(location + "-wal"))]


def vacuum_into(conn: sqlite3.Connection, dest: Path) -> None:
    """Write a consistent, compacted copy of the inbox into the new file ``dest``.

    ``VACUUM INTO`` reads one snapshot (WAL lets writers carry on meanwhile)
    and writes every table afresh, so the copy holds no free pages, can be
    no more damaged than the rows it read, and (by the pragma set first)
    can hand freed space back after pruning even when the original, made by
    an older agentbox, could not.
    """
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # applies to the copy only
    conn.execute("VACUUM INTO ?", (str(dest),))


CHECKPOINT_WAIT_MS = 200


def reclaim(conn: sqlite3.Connection, max_pages: int) -> int:
    """Hand up to ``max_pages`` free pages back to the disk, in one transaction;
    once none are left, the write-ahead log too. Returns the pages handed back.

    Only a file made with ``auto_vacuum = INCREMENTAL`` (every inbox this
    version creates) can give pages back; an older file reuses its free pages
    instead, so it stops growing without shrinking.
    """
    incremental = conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    pages = min(int(conn.execute("PRAGMA freelist_count").fetchone()[0]), max_pages)
    if incremental and pages:
        # One statement, its own transaction. It frees one page per step, and only
        # executescript steps a statement that returns no rows to its end.
        conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        return pages
    _truncate_log(conn)
    return 0


def _truncate_log(conn: sqlite3.Connection) -> None:
    """Cut the write-ahead log back to nothing, if no reader needs it right now.

    A big prune leaves a log as large as what it changed. The checkpoint
    waits a moment at most for readers (a backup in progress, say), and is
    simply skipped if they stay: the log is cut back at a later checkpoint.
    """
    wait = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute(f"PRAGMA busy_timeout = {min(wait, CHECKPOINT_WAIT_MS)}")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {wait}")
