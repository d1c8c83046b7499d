"""Opening an inbox file: permissions, pragmas, migrations, write transactions.

Every write goes through :func:`write`, a ``BEGIN IMMEDIATE`` transaction:
the write lock is taken up front, so two writers queue on the busy timeout
instead of one failing half-way with "database is locked".
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentbox.backends.sqlite.schema import COUNTED, MIGRATIONS, SCHEMA_VERSION
from agentbox.errors import Busy, DatabaseError

APPLICATION_ID = 0x41474258  # "AGBX": marks a file as an agentbox inbox
BUSY_TIMEOUT_S = 30.0
_SQLITE_HEADER = b"SQLite format 3\x00"


def translate(exc: sqlite3.Error, path: str | os.PathLike[str] = "") -> Exception:
    """Turn an sqlite3 error into the agentbox error a user can act on."""
    text = str(exc)
    where = f"{os.fspath(path)}: " if path else ""
    if _is_busy(exc):
        return Busy(f"{where}database stayed busy for {BUSY_TIMEOUT_S:.0f}s; try again")
    if "readonly" in text or "read-only" in text:
        return DatabaseError(f"{where}database is read-only; agentbox needs to write to it")
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return DatabaseError(f"{where}file is corrupt or not an agentbox database")
    if "unable to open" in text:
        return DatabaseError(f"{where}cannot open the database file")
    if "disk" in text and ("full" in text or "I/O" in text):
        return DatabaseError(f"{where}disk error: {text}")
    return DatabaseError(f"{where}database error: {text}")


def _create_private_file(path: Path, make_folders: bool) -> None:
    """Make an empty 0600 file, so SQLite and its -wal/-shm files inherit 0600.

    Missing folders are made 0700 only when asked: a mistyped ``--db`` folder
    is an error, not a new tree.
    """
    if make_folders:
        from agentbox.paths import private_dir

        private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except FileNotFoundError:
        raise DatabaseError(f"{path}: folder {path.parent} does not exist") from None
    except OSError as exc:
        raise DatabaseError(f"{path}: cannot create the database: "
                            f"{exc.strerror or exc}") from None
    os.close(fd)


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except IsADirectoryError:
        raise DatabaseError(f"{path}: is a directory, not a database file") from None
    except PermissionError:
        raise DatabaseError(f"{path}: permission denied") from None
    if head and head != _SQLITE_HEADER:
        raise DatabaseError(f"{path}: not an agentbox database (not an SQLite file)")


def connect(path: str | os.PathLike[str], *, synchronous: str = "FULL",
            make_folders: bool = True) -> sqlite3.Connection:
    """Open (creating if needed) an inbox file and bring its schema up to date."""
    file = Path(path)
    if not file.exists():
        _create_private_file(file, make_folders)
    else:
        _check_header(file)
    try:
        conn = sqlite3.connect(file, isolation_level=None, timeout=BUSY_TIMEOUT_S,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise translate(exc, file) from None
    try:
        # Refuse a foreign or newer file before anything (even the journal
        # mode, which lives in the file header) is written to it.
        version = _check_identity(conn, file)
        _enable_wal(conn, file)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        migrate(conn, file, version)
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, file) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Switch to WAL, waiting out other processes doing the same.

    Changing the journal mode needs an exclusive lock, and SQLite answers
    SQLITE_BUSY at once (without the busy handler) when two connections race
    to convert a new file, so the wait is ours to do.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    if str(mode).lower() != "wal":
        raise DatabaseError(f"{path}: cannot switch the database to WAL mode")


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _check_identity(conn: sqlite3.Connection, path: Path) -> int:
    """Refuse a foreign or newer file; return its schema version.

    One statement, so one snapshot: read separately, the version and the
    table count could straddle another process's first migration and make
    a half-read new inbox look foreign.
    """
    version, app_id, tables = conn.execute(
        """SELECT (SELECT user_version FROM pragma_user_version),
                  (SELECT application_id FROM pragma_application_id),
                  (SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table')""").fetchone()
    if version == 0 and app_id == 0:
        if tables:
            raise DatabaseError(f"{path}: an SQLite file, but not an agentbox database")
        return 0
    if app_id != APPLICATION_ID:
        raise DatabaseError(f"{path}: an SQLite file, but not an agentbox database")
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{path}: made by a newer agentbox (schema {version}, this one knows "
            f"up to {SCHEMA_VERSION}); upgrade agentbox to use it")
    return int(version)


def migrate(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Apply each missing migration in its own transaction, with its record.

    ``version`` is the file's as last read; it is read again inside each
    transaction, so processes racing to create the same new file apply each
    migration exactly once.
    """
    while version < SCHEMA_VERSION:
        with write(conn):
            version = _check_identity(conn, path)
            if version >= SCHEMA_VERSION:
                break
            _apply(conn, version + 1)
            version += 1


def _apply(conn: sqlite3.Connection, target: int) -> None:
    # executescript() would COMMIT first; run statement by statement instead.
    for statement in _split(MIGRATIONS[target - 1]):
        conn.execute(statement)
    if target == 1:
        import secrets  # only when a file is created: not paid by every ingest

        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("INSERT INTO meta (key, value) VALUES ('instance', ?)",
                     (secrets.token_hex(6),))
    conn.execute("INSERT INTO migrations (version, applied_at) VALUES (?, strftime('%s'))",
                 (target,))
    conn.execute(f"PRAGMA user_version = {target}")


def _split(script: str) -> Iterator[str]:
    """Split a migration script into statements, keeping trigger bodies whole."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                yield buffer
            buffer = ""
    if buffer.strip():
        raise ValueError(f"incomplete statement in migration: {buffer[:60]!r}")


@contextmanager
def write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction: COMMIT on success, ROLLBACK on any error."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        raise translate(exc) from None
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise translate(exc) from None


def state_counts(conn: sqlite3.Connection, table: str) -> dict[str, int]:
    """Rows of ``table`` per state, every state present, from the trigger-kept tallies."""
    rows = conn.execute("SELECT state, n FROM state_counts WHERE tbl = ?", (table,)).fetchall()
    found = {state: int(n) for state, n in rows}
    return {state: found.get(state, 0) for state in COUNTED[table][1]}


def instance_id(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    return str(row[0])
