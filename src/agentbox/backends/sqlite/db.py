"""Opening an inbox file: permissions, pragmas, migrations, write transactions.

Every write goes through :func:`write`, a ``BEGIN IMMEDIATE`` transaction
(or is a single autocommit statement, as a new event's INSERT is): the write
lock is taken up front, by :func:`take_write_lock`, so two writers queue for it
instead of one failing half-way with "database is locked".
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentbox.backends.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from agentbox.errors import Busy, DatabaseError, NoInbox

APPLICATION_ID = 0x41474258  # "AGBX": marks a file as an agentbox inbox
WAL_KEEP = 4 * 1024 * 1024  # bytes of write-ahead log kept after a checkpoint
BUSY_TIMEOUT_S = 30.0
# Waiting for the write lock: the first pause, and the longest (see take_write_lock).
_FIRST_PAUSE_S = 50e-6
_LONGEST_PAUSE_S = 2e-3


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


def _create_private_file(path: Path, make_folders: bool) -> bool:
    """Make an empty 0600 file, so SQLite and its -wal/-shm files inherit 0600.

    False when something is already there (a file, or a symlink, which
    ``O_EXCL`` never follows): :func:`_check_existing` judges it. Missing
    folders are made 0700 only when asked: a mistyped ``--db`` folder is an
    error, not a new tree.
    """
    if make_folders:
        from agentbox.paths import private_dir

        private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except FileNotFoundError:
        raise DatabaseError(f"{path}: folder {path.parent} does not exist") from None
    except OSError as exc:
        raise DatabaseError(f"{path}: cannot create the database: "
                            f"{exc.strerror or exc}") from None
    os.close(fd)
    return True


def _check_existing(path: Path) -> None:
    """Let SQLite open only a regular file that is an inbox, or empty and ours.

    - A symlink is followed to an existing file, but agentbox never creates
      an inbox through one: a dangling symlink is refused (else the target
      would be made with the umask's mode, and wherever the link points).
    - A FIFO, a device or a socket is refused before it is opened (opening a
      FIFO blocks until a writer comes).
    - An empty file becomes a new inbox, as a crash between creating an
      inbox and its first migration leaves one; it must belong to this user
      and is made 0600 (a file planted by another user, or readable by
      others, would otherwise receive the inbox).
    - Anything else is left for SQLite to read (a file that is not an SQLite
      database is refused on the first read, in :func:`connect`).
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise DatabaseError(
                f"{path}: a symlink to {os.readlink(path)}, which does not exist; agentbox "
                "does not create an inbox through a symlink: use --db with the target, "
                "or remove the link") from None
        raise DatabaseError(f"{path}: vanished while being opened") from None
    except PermissionError:
        raise DatabaseError(f"{path}: permission denied") from None
    if stat.S_ISDIR(info.st_mode):
        raise DatabaseError(f"{path}: is a directory, not a database file")
    if not stat.S_ISREG(info.st_mode):
        raise DatabaseError(f"{path}: not a regular file (a FIFO, a device or a socket); "
                            "an inbox is a file")
    if info.st_size == 0:
        _adopt_empty(path, info)
    # Anything else SQLite reads itself (its header is checked by _check_identity):
    # a descriptor of our own opened and closed on the file here would drop the POSIX
    # locks this process holds on it through any other connection (SQLite's locks are
    # the process's), and another process could then checkpoint and delete the log
    # those connections still write to.


def _adopt_empty(path: Path, info: os.stat_result) -> None:
    """An empty file about to become an inbox: ours, and private from now on."""
    if info.st_uid != os.geteuid():
        raise DatabaseError(f"{path}: an empty file that belongs to another user (uid "
                            f"{info.st_uid}); agentbox makes an inbox only in a file of its own")
    if stat.S_IMODE(info.st_mode) & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise DatabaseError(f"{path}: cannot make the new inbox private: "
                                f"{exc.strerror or exc}") from None


class InboxConnection(sqlite3.Connection):
    """A connection to an inbox file, knowing how long its writes may wait for the lock,
    and whether SQLite's own busy handler is on (see :func:`take_write_lock`)."""

    busy_timeout_s = BUSY_TIMEOUT_S
    waits = True  # the busy timeout is set: a statement waits for a lock by itself


def waiting(conn: sqlite3.Connection) -> None:
    """SQLite's busy handler on again, for statements that wait for a lock by themselves
    (reads during another process's recovery of the log, checkpoints, upkeep)."""
    if isinstance(conn, InboxConnection) and not conn.waits:
        conn.execute(f"PRAGMA busy_timeout = {round(conn.busy_timeout_s * 1000)}")
        conn.waits = True


def connect(path: str | os.PathLike[str], *, durable: bool = True,
            make_folders: bool = True, create: bool = True,
            busy_timeout: float | None = None) -> sqlite3.Connection:
    """Open an inbox file and bring its schema up to date.

    A missing file is created (0600), unless ``create`` is false: then it is
    :class:`NoInbox`, and nothing is made. ``durable`` commits wait for the
    disk (``synchronous=FULL``: an acknowledged webhook survives power loss);
    without it (scratch inboxes) they do not wait at all. ``busy_timeout``
    (seconds, default :data:`BUSY_TIMEOUT_S`) bounds how long a statement
    waits for a lock another connection holds.
    """
    wait = BUSY_TIMEOUT_S if busy_timeout is None else busy_timeout
    file = Path(path)
    if not create and not os.path.lexists(file):
        raise NoInbox(os.fspath(path))
    if not create or not _create_private_file(file, make_folders):
        _check_existing(file)
    try:
        conn = sqlite3.connect(file, isolation_level=None, timeout=wait,
                               check_same_thread=False, factory=InboxConnection)
    except sqlite3.Error as exc:
        raise translate(exc, file) from None
    conn.busy_timeout_s = wait
    try:
        # Refuse a foreign or newer file before anything (even the journal
        # mode, which lives in the file header) is written to it.
        try:
            version = _check_identity(conn, file)
        except sqlite3.DatabaseError as exc:
            if "not a database" not in str(exc):
                raise
            raise DatabaseError(f"{file}: not an agentbox database (not an SQLite file)"
                                ) from None
        if version == 0:
            # Only a file with no table yet can take it, and before WAL writes the
            # header: space that prune frees can then be handed back to the disk.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        _enable_wal(conn, file)
        conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'OFF'}")
        # A log that grew during a long read (a backup) or a big prune is cut back
        # once it has been checkpointed, instead of keeping its size for good.
        conn.execute(f"PRAGMA journal_size_limit = {WAL_KEEP}")
        migrate(conn, file, version)
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, file) from None
    except BaseException:
        conn.close()
        raise
    return conn


def connect_empty() -> sqlite3.Connection:
    """A new, empty inbox in memory that refuses every write: what a command that
    only reads sees of an inbox that does not exist, on any backend."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    migrate(conn, Path(":memory:"), 0)
    conn.execute("PRAGMA query_only = ON")
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
def write(conn: sqlite3.Connection, durable: bool = True) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction: COMMIT on success, ROLLBACK on any error.

    Its errors are SQLite's own: the caller knows which inbox it writes, and says so
    as it translates them (a failed write names the inbox, as a failed read does).

    ``durable=False`` commits without waiting for the disk (``synchronous=NORMAL``
    for this transaction alone): still atomic and consistent, and carried to disk
    by the next durable commit, but lost if the machine goes down first. Only
    lease writes use it; see :mod:`agentbox.ledger.lease`.
    """
    level = None if durable else int(conn.execute("PRAGMA synchronous").fetchone()[0])
    if level is not None and level > 1:  # FULL or EXTRA: relax it for this commit
        conn.execute("PRAGMA synchronous=NORMAL")
    try:
        take_write_lock(conn, "BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        if level is not None and level > 1:
            conn.execute(f"PRAGMA synchronous={level}")


@contextmanager
def savepoint(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write inside an open transaction (a group's): kept when it ends, undone alone
    when anything escapes it, the transaction going on either way."""
    conn.execute("SAVEPOINT agentbox_write")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK TO agentbox_write")
        conn.execute("RELEASE agentbox_write")
        raise
    conn.execute("RELEASE agentbox_write")


def take_write_lock(conn: sqlite3.Connection, statement: str,
                    params: tuple[object, ...] = ()) -> list[Any]:
    """Run a statement that takes the write lock, waiting for the lock in short steps;
    return its rows.

    SQLite's own busy handler sleeps 1, 2, 5, 10 ms and more between tries, while
    an ingest holds the lock for about a tenth of a millisecond: writers asleep
    leave the lock idle (eight processes ingesting at once stored half as many
    events per second as one). Here the lock is tried at once, then after pauses
    from 50 µs doubling to 2 ms, with jitter so that waiters spread out, for as
    long as the connection's busy timeout allows.

    The busy handler is turned off for it and left off afterwards: a process that
    ingests event after event sets it once, not twice per event. Whatever needs
    it again turns it back on first (:func:`waiting`; the engine's reads do).
    """
    inbox = isinstance(conn, InboxConnection)  # else: as it was found, afterwards
    budget = conn.busy_timeout_s if isinstance(conn, InboxConnection) else BUSY_TIMEOUT_S
    if not isinstance(conn, InboxConnection) or conn.waits:
        conn.execute("PRAGMA busy_timeout = 0")
        if isinstance(conn, InboxConnection):
            conn.waits = False
    try:
        try:
            return conn.execute(statement, params).fetchall()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
        import random  # only once the lock was found taken

        deadline = time.monotonic() + budget
        pause = _FIRST_PAUSE_S
        while True:
            time.sleep(pause * random.uniform(0.5, 1.5))
            try:
                return conn.execute(statement, params).fetchall()
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
            pause = min(pause * 2, _LONGEST_PAUSE_S)
    finally:
        if not inbox:
            conn.execute(f"PRAGMA busy_timeout = {round(budget * 1000)}")
