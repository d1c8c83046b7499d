"""The SQLite engine's refusals, word for word: the files SQLite is never let open, the
switch to WAL that another connection holds up, and every failing statement naming the
inbox it failed on; with the busy handler a read turns back on (once) after a write,
and the tallies of an older file that lacks a state's row."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentbox.backends.sqlite import db
from agentbox.backends.sqlite.engine import SqliteEngine
from agentbox.errors import Busy, DatabaseError
from agentbox.ledger.store import Store
from agentbox.location import empty_view
from agentbox.rules.records import EVENT_STATES
from support.clock import T0
from support.sqlite import null_device, sqlite_store

if TYPE_CHECKING:
    from agentbox.ledger.engine import Tx

pytestmark = pytest.mark.sqlite_file

WAIT_MS = round(db.BUSY_TIMEOUT_S * 1000)  # the busy handler as a read leaves it
NOT_REGULAR = "not a regular file (a FIFO, a device or a socket); an inbox is a file"
NOBODY = 65534  # the unprivileged user a root test run gives its rights up for


def engine_of(store: Store) -> SqliteEngine:
    engine = store.engine
    assert isinstance(engine, SqliteEngine)
    return engine


def busy_timeout_ms(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA busy_timeout").fetchone()[0])


def opening_says(path: Path) -> str:
    """The one line an attempt to open ``path`` as an inbox ends in."""
    with pytest.raises(DatabaseError) as caught:
        sqlite_store(path)
    assert type(caught.value) is DatabaseError
    return str(caught.value)


# -- the files SQLite is never let open -----------------------------------------------------


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_device(path: Path) -> None:
    # a link is followed: what it reaches is judged
    path.symlink_to(null_device(path.with_name(path.name + ".node")))


def make_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))


def make_folder(path: Path) -> None:
    path.mkdir()


NOT_FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (make_fifo, NOT_REGULAR),
    "device": (make_device, NOT_REGULAR),
    "socket": (make_socket, NOT_REGULAR),
    "folder": (make_folder, "is a directory, not a database file"),
}


@pytest.mark.parametrize("kind", list(NOT_FILES))
def test_what_is_not_a_file_is_refused_before_sqlite_opens_it(tmp_path: Path,
                                                              kind: str) -> None:
    """A FIFO opened would block until a writer came: the test ending at all shows it
    was judged by its type alone."""
    make, message = NOT_FILES[kind]
    path = tmp_path / "inbox.sqlite3"
    make(path)
    assert opening_says(path) == f"{path}: {message}"


def test_a_file_removed_while_being_opened_is_said_to_have_vanished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process removes the file between its creation being refused (a file is
    there) and its look: nothing is made in its place."""
    path = tmp_path / "inbox.sqlite3"
    path.touch()
    create = db._create_private_file

    def removed_once_found(target: Path, make_folders: bool) -> bool:
        made = create(target, make_folders)
        os.remove(target)
        return made

    monkeypatch.setattr(db, "_create_private_file", removed_once_found)
    assert opening_says(path) == f"{path}: vanished while being opened"
    assert not os.path.lexists(path)


def opened_without_privileges(name: str) -> str:
    """What opening ``name`` (in the working folder) says to a user who may not pass
    through every folder: a root test run says it from a child process that gives its
    rights up first (root passes through any folder)."""

    def attempt() -> str:
        try:
            db.connect(name, make_folders=False).close()
        except DatabaseError as exc:
            return str(exc)
        return "opened"

    if os.geteuid() != 0:
        return attempt()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: whatever happens, it only writes what it saw, and exits
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                said = attempt()
            except BaseException as exc:  # reported to the parent, whatever it is
                said = repr(exc)
            os.write(write_end, said.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as child:
        said = child.read().decode()
    os.waitpid(pid, 0)
    return said


def test_a_file_behind_a_folder_it_may_not_enter_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The link is there (so creating the file is refused), what it points to cannot be
    reached: permission denied, named, not an OSError."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    locked = shared / "locked"
    locked.mkdir()
    locked.chmod(0o000)
    (shared / "inbox.sqlite3").symlink_to("locked/inbox.sqlite3")
    monkeypatch.chdir(shared)
    try:
        said = opened_without_privileges("inbox.sqlite3")
    finally:
        locked.chmod(0o700)
    assert said == "inbox.sqlite3: permission denied"


def test_an_inbox_under_a_file_instead_of_a_folder_cannot_be_made_and_says_why(
        tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("a file, not a folder")
    path = tmp_path / "notes" / "inbox.sqlite3"
    assert opening_says(path) == f"{path}: cannot create the database: Not a directory"


def test_a_file_this_process_may_not_look_at_is_refused_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal above, met in this process (a root run meets it in a child, where
    no test of this process's code can see it): the file is there, its status cannot be
    read."""
    path = tmp_path / "inbox.sqlite3"
    sqlite_store(path).close()
    look = os.stat

    def refused(target: object, *args: object, **kwargs: object) -> os.stat_result:
        if os.fspath(target) == os.fspath(path):  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", str(target))
        return look(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", refused)
    assert opening_says(path) == f"{path}: permission denied"


def test_an_inbox_others_may_read_keeps_its_mode(tmp_path: Path) -> None:
    """Only an empty file is made private as it becomes an inbox: a file with anything in
    it is SQLite's to read, and its mode is its owner's business."""
    path = tmp_path / "inbox.sqlite3"
    sqlite_store(path).close()
    path.chmod(0o644)
    with sqlite_store(path) as store:
        assert store.ingest("hook", "1", "{}", T0).outcome == "stored"
    assert path.stat().st_mode & 0o777 == 0o644


# -- the switch to WAL ----------------------------------------------------------------------


def rollback_journal_inbox(path: Path) -> Path:
    """A closed inbox file turned back to a rollback journal, as another tool may leave
    it: opening it switches it to WAL again, which needs the file to itself."""
    sqlite_store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    return path


@contextmanager
def read_under_way(path: Path, lasting: float) -> Iterator[None]:
    """Another connection in the middle of a read of the file for ``lasting`` seconds,
    or until the block ends: while it lasts no journal mode can change."""
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchone()
    done = threading.Lock()

    def finish() -> None:
        with done:
            if reader.in_transaction:
                reader.execute("ROLLBACK")

    timer = threading.Timer(lasting, finish)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        finish()
        reader.close()


def journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def test_the_switch_to_wal_waits_out_a_read_in_small_steps(tmp_path: Path) -> None:
    """With no busy handler (busy_timeout 0) SQLite answers busy at once, as it does to
    two connections converting a new file together: the switch is tried again, after
    pauses that start at a millisecond, and the file ends in WAL for every connection."""
    path = rollback_journal_inbox(tmp_path / "inbox.sqlite3")
    with read_under_way(path, lasting=0.05):
        started = time.monotonic()
        conn = db.connect(path, busy_timeout=0)
        waited = time.monotonic() - started
    try:
        assert str(conn.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"
        assert journal_mode(path) == "wal"
        assert 0.05 <= waited < 0.5
    finally:
        conn.close()


def test_a_read_that_outlasts_the_busy_timeout_leaves_the_file_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch is tried for BUSY_TIMEOUT_S, then given up as Busy, naming the inbox;
    the read ends later (else a switch tried for ever would hang the test)."""
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)
    path = rollback_journal_inbox(tmp_path / "inbox.sqlite3")
    with read_under_way(path, lasting=3.0):
        started = time.monotonic()
        with pytest.raises(Busy) as caught:
            db.connect(path, busy_timeout=0)
        waited = time.monotonic() - started
    assert str(caught.value) == f"{path}: database stayed busy for 0s; try again"
    assert 0.2 <= waited < 2.0
    assert journal_mode(path) == "delete"


def test_an_error_other_than_busy_is_raised_at_the_first_try(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a busy file is worth trying again: a read-only one is not (the short timeout
    bounds what a retry would cost)."""
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)
    path = rollback_journal_inbox(tmp_path / "inbox.sqlite3")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    tried: list[str] = []
    conn.set_trace_callback(tried.append)
    try:
        with pytest.raises(sqlite3.OperationalError,
                           match=r"^attempt to write a readonly database$"):
            db._enable_wal(conn, path)
    finally:
        conn.close()
    assert tried == ["PRAGMA journal_mode=WAL"]


def test_a_database_that_stays_out_of_wal_is_refused() -> None:
    """SQLite answers with the mode it kept when it cannot switch (a database in memory
    keeps "memory"): agentbox does not go on without WAL."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        with pytest.raises(DatabaseError) as caught:
            db._enable_wal(conn, Path("/srv/alice.sqlite3"))
    finally:
        conn.close()
    assert str(caught.value) == "/srv/alice.sqlite3: cannot switch the database to WAL mode"


# -- the busy handler, back on for reads ----------------------------------------------------


READS: dict[str, Callable[[Store], object]] = {
    "rows": lambda s: s._read().rows("SELECT 1"),
    "one": lambda s: s._read().one("SELECT 1"),
}


@pytest.mark.parametrize("read", list(READS))
def test_a_read_after_a_write_waits_for_locks_again(store: Store, read: str) -> None:
    store.ingest("hook", "1", "{}", T0)
    conn = engine_of(store).conn
    assert busy_timeout_ms(conn) == 0  # a write leaves the busy handler off
    READS[read](store)
    assert busy_timeout_ms(conn) == WAIT_MS


def test_a_glance_never_waits_for_locks(store: Store) -> None:
    """The look an ingest takes before writing is Busy at once, not a wait."""
    store.ingest("hook", "1", "{}", T0)
    engine_of(store).glance(store._read().box).one("SELECT 1")
    assert busy_timeout_ms(engine_of(store).conn) == 0


def test_the_busy_handler_is_turned_on_once_and_off_by_the_next_write(store: Store) -> None:
    """Reads after reads send nothing more; the write after them turns it off again."""
    store.ingest("hook", "1", "{}", T0)
    conn = engine_of(store).conn
    sent: list[str] = []
    conn.set_trace_callback(sent.append)
    try:
        for _ in range(3):
            store._read().one("SELECT 1")
    finally:
        conn.set_trace_callback(None)
    assert [s for s in sent if "busy_timeout" in s] == [f"PRAGMA busy_timeout = {WAIT_MS}"]
    store.ingest("hook", "2", "{}", T0)
    assert busy_timeout_ms(conn) == 0


def test_reads_leave_a_plain_connections_busy_handler_alone() -> None:
    """An empty view's connection is sqlite3's own, not an inbox's: its handler is kept."""
    view = empty_view("/nowhere/alice.sqlite3")
    conn = engine_of(view).conn
    assert not isinstance(conn, db.InboxConnection)
    before = busy_timeout_ms(conn)
    assert view._read().one("SELECT 1") == (1,)
    assert busy_timeout_ms(conn) == before
    view.close()


# -- every failing statement names the inbox ------------------------------------------------


BAD_READ = "SELECT nope FROM events WHERE inbox_id = :box"
BAD_WRITE = "UPDATE events SET nope = 1 WHERE inbox_id = :box"


def in_transaction(statement: Callable[[Store, Tx], object]) -> Callable[[Store], object]:
    """statement(store, tx), inside a write transaction of the store."""

    def run(store: Store) -> object:
        with store._write() as tx:
            return statement(store, tx)

    return run


FAILING: dict[str, Callable[[Store], object]] = {
    "rows": lambda s: s._read().rows(BAD_READ),
    "one": lambda s: s._read().one(BAD_READ),
    "glance": lambda s: engine_of(s).glance(s._read().box).one(BAD_READ),
    "tx.run": in_transaction(lambda s, tx: tx.run(BAD_WRITE)),
    "tx.many": in_transaction(lambda s, tx: tx.many(BAD_WRITE, [{}, {}])),
}


@pytest.mark.parametrize("statement", list(FAILING))
def test_a_failing_statement_names_the_inbox(store: Store, statement: str) -> None:
    with pytest.raises(DatabaseError) as caught:
        FAILING[statement](store)
    assert type(caught.value) is DatabaseError
    assert str(caught.value) == f"{store.location}: database error: no such column: nope"


FROZEN = """CREATE TRIGGER frozen BEFORE INSERT ON events
            BEGIN SELECT RAISE(ABORT, 'events are frozen'); END"""
INGESTS: dict[str, Callable[[Store], object]] = {
    "alone": lambda s: s.ingest("hook", "1", "{}", T0),
    "in a transaction": in_transaction(
        lambda s, tx: s.engine.store_event(tx, tx.box, "hook", "1", "{}", T0)),
}


@pytest.mark.parametrize("ingest", list(INGESTS))
def test_an_event_the_file_refuses_names_the_inbox(store: Store, ingest: str) -> None:
    """A trigger in the file (put there by another tool) refuses every new event."""
    other = sqlite3.connect(store.location, isolation_level=None)
    other.execute(FROZEN)
    other.close()
    with pytest.raises(DatabaseError) as caught:
        INGESTS[ingest](store)
    assert str(caught.value) == f"{store.location}: database error: events are frozen"
    assert store.status().events["pending"] == 0


# -- the tallies ----------------------------------------------------------------------------


def test_a_state_without_a_tally_row_counts_zero(store: Store) -> None:
    """An older file may lack a state's row in state_counts: the state reads as 0."""
    store.ingest("hook", "1", "{}", T0)
    engine_of(store).conn.execute(
        "DELETE FROM state_counts WHERE tbl = 'events' AND state = 'dead'")
    assert store.status().events == {state: int(state == "pending") for state in EVENT_STATES}


def test_a_file_sqlite_cannot_open_is_named(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite refusing the file at the open itself (its folder gone in between, say):
    the error names the file, in agentbox's words."""
    path = tmp_path / "inbox.sqlite3"

    def refuse(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(db.sqlite3, "connect", refuse)
    with pytest.raises(DatabaseError) as caught:
        db.connect(path)
    assert str(caught.value) == f"{path}: cannot open the database file"


def test_an_inbox_being_restored_keeps_an_opener_waiting_only_as_long_as_it_was_told(
        tmp_path: Path) -> None:
    """A restore holds the inbox alone while it swaps the file: an engine opened with a
    short busy timeout gives up after it, naming the inbox, not after the default."""
    from agentbox.backends.sqlite import presence

    path = tmp_path / "inbox.sqlite3"
    SqliteEngine(path).close()
    alone = presence.take_alone(str(path))
    try:
        started = time.monotonic()
        with pytest.raises(Busy) as caught:
            SqliteEngine(path, busy_timeout=0.2)
        assert time.monotonic() - started < db.BUSY_TIMEOUT_S / 2
    finally:
        os.close(alone)
    assert str(caught.value) == f"{path}: a restore is replacing the inbox; try again"
