"""Looking after one SQLite inbox file: its vitals, its health, a consistent copy."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from agentbox.backends.sqlite import db
from agentbox.backends.sqlite.schema import SCHEMA_VERSION
from agentbox.errors import AgentboxError, DatabaseError, UsageError
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


def readings(conn: sqlite3.Connection) -> tuple[int | None, int | None, int | None, int | None]:
    """(oldest pending arrival, last run, last prune, last activity), each O(1)."""
    row = conn.execute("SELECT created_at FROM events WHERE status = 'pending' "
                       "ORDER BY id LIMIT 1").fetchone()
    oldest = None if row is None else int(row[0])
    last_run, last_prune = (None if v is None else int(v)
                            for v in (db.meta(conn, db.LAST_RUN), db.meta(conn, db.LAST_PRUNE)))
    # The newest arrival and the newest recorded transition: both the last row of
    # their table, so neither is a scan.
    moments = [last_run] + [
        None if row is None else int(row[0]) for row in (
            conn.execute("SELECT created_at FROM events ORDER BY id DESC LIMIT 1").fetchone(),
            conn.execute("SELECT at FROM history ORDER BY id DESC LIMIT 1").fetchone())]
    known = [m for m in moments if m is not None]
    return oldest, last_run, last_prune, max(known) if known else None


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


def backup(conn: sqlite3.Connection, dest: str, replace: bool) -> int:
    """Write a consistent, compacted copy of the inbox to ``dest``; its size.

    ``VACUUM INTO`` reads one snapshot (WAL lets writers carry on meanwhile)
    and writes every table afresh, so the copy holds no free pages, can be
    no more damaged than the rows it read, and (by the pragma set first)
    can hand freed space back after pruning even when the original, made by
    an older agentbox, could not.
    """

    def fill(temp: Path) -> None:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # applies to the copy only
        conn.execute("VACUUM INTO ?", (str(temp),))

    return write_copy(dest, replace, fill)


def write_copy(dest: str, replace: bool, fill: Callable[[Path], None]) -> int:
    """Have ``fill`` write an inbox file beside ``dest``, then put it in place; its size.

    The copy is written 0600 beside ``dest``, synced, then put in place in
    one step: ``dest`` is whole or absent, never half written. Without
    ``replace`` an existing ``dest`` is refused, even one that appeared while
    the copy was being made. Every backend's backup ends here.
    """
    import secrets

    target = Path(dest)
    if target.is_dir():
        raise UsageError(f"{dest}: is a folder; name the backup file")
    if not replace and os.path.lexists(target):
        raise UsageError(f"{dest} exists; pass --force to replace it")
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise AgentboxError(f"{dest}: cannot write the backup: {exc.strerror or exc}") from None
    try:
        fill(temp)
        _sync(temp)
        if replace:
            for side in SIDE_FILES:  # a stale log beside the new file would be replayed into it
                Path(f"{target}{side}").unlink(missing_ok=True)
            os.replace(temp, target)
        else:
            try:
                os.link(temp, target)
            except FileExistsError:
                raise UsageError(f"{dest} exists; pass --force to replace it") from None
        _sync(target.parent)
    except OSError as exc:
        raise DatabaseError(f"{dest}: cannot write the backup: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)
        for side in SIDE_FILES:
            Path(f"{temp}{side}").unlink(missing_ok=True)
    return target.stat().st_size


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
