"""The database file: versioned migrations, refusal of foreign files, pragmas, holder ids."""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentbox.backends.sqlite import db, schema
from agentbox.errors import Busy, DatabaseError, NoInbox
from agentbox.ledger.store import Store
from agentbox.rules.lease import new_holder_id
from agentbox.rules.outbox import Dispatch
from support.clock import T0
from support.sqlite import sqlite_store

pytestmark = pytest.mark.sqlite_file  # the inbox file itself: its pragmas, modes, migrations


def fingerprint(path: Path) -> tuple[str, list[str]]:
    """The file's bytes and the names beside it: enough to see any change."""
    return (hashlib.sha256(path.read_bytes()).hexdigest(),
            sorted(p.name for p in path.parent.iterdir()))


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def tables(path: Path) -> set[str]:
    with raw(path) as conn:
        return {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall()}


def versions(path: Path) -> tuple[int, int, list[int]]:
    """(user_version, application_id, versions recorded in migrations)."""
    conn = raw(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        recorded: list[int] = []
        if "migrations" in tables(path):
            recorded = [r[0] for r in conn.execute(
                "SELECT version FROM migrations ORDER BY version").fetchall()]
        return version, app_id, recorded
    finally:
        conn.close()


def test_a_new_file_is_migrated_once_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "inbox.sqlite3"
    with sqlite_store(path) as first:
        instance = first.instance_id()
    assert versions(path) == (schema.SCHEMA_VERSION, db.APPLICATION_ID,
                              list(range(1, schema.SCHEMA_VERSION + 1)))
    with sqlite_store(path) as again:
        assert again.instance_id() == instance
    assert versions(path)[2] == list(range(1, schema.SCHEMA_VERSION + 1))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_each_migration_is_recorded_with_the_time_it_ran(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    began = int(time.time())
    db.connect(path).close()
    with raw(path) as conn:
        times = [r[0] for r in conn.execute("SELECT applied_at FROM migrations")]
    assert len(times) == schema.SCHEMA_VERSION
    assert all(began <= int(t) <= time.time() + 1 for t in times), times


def test_an_inbox_opened_with_no_options_is_durable_and_makes_its_folders(
        tmp_path: Path) -> None:
    from agentbox.backends.sqlite.engine import SqliteEngine

    engine = SqliteEngine(tmp_path / "a" / "inbox.sqlite3")
    try:
        assert engine.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        engine.close()
    conn = db.connect(tmp_path / "b" / "inbox.sqlite3")
    try:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        conn.close()


def test_an_engine_that_must_not_create_its_file_makes_nothing(tmp_path: Path) -> None:
    from agentbox.backends.sqlite.engine import SqliteEngine

    path = tmp_path / "missing.sqlite3"
    with pytest.raises(NoInbox):
        SqliteEngine(path, create=False)
    assert list(tmp_path.iterdir()) == []


def test_migrating_a_file_another_process_brought_up_to_date_does_nothing(
        tmp_path: Path) -> None:
    """The version read before is stale (another process migrated the file since): each
    migration's transaction reads it again and applies nothing."""
    path = tmp_path / "inbox.sqlite3"
    db.connect(path).close()
    before = versions(path)
    conn = raw(path)
    try:
        db.migrate(conn, path, 0)
    finally:
        conn.close()
    assert versions(path) == before


def test_a_file_a_newer_agentbox_migrated_meanwhile_is_refused_naming_it(
        tmp_path: Path) -> None:
    """The version is read again inside the migration's transaction: a newer agentbox
    that took the file on since it was first read is found there, and named."""
    path = tmp_path / "inbox.sqlite3"
    db.connect(path).close()
    conn = raw(path)
    try:
        conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
        with pytest.raises(DatabaseError) as refused:
            db.migrate(conn, path, 0)
    finally:
        conn.close()
    assert str(refused.value).startswith(f"{path}: made by a newer agentbox")


def test_an_up_to_date_file_opens_while_another_process_holds_its_write_lock(
        tmp_path: Path) -> None:
    """Opening takes no write lock once every migration is in: a command that only
    reads does not wait behind a writer."""
    path = tmp_path / "inbox.sqlite3"
    db.connect(path).close()
    writer = raw(path)
    try:
        writer.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        db.connect(path, busy_timeout=2).close()
        assert time.monotonic() - started < 1
    finally:
        writer.execute("ROLLBACK")
        writer.close()


class _RacedConnection(db.InboxConnection):
    """A connection to a new file that another, newer agentbox makes its own just before
    this one's first migration takes the write lock."""

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql.startswith("BEGIN IMMEDIATE") and not getattr(self, "raced", False):
            self.raced = True
            with raw(Path(self.execute("PRAGMA database_list").fetchone()[2])) as other:
                other.execute(f"PRAGMA application_id = {db.APPLICATION_ID}")
                other.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
        return super().execute(sql, *args)


def refusal_of_new_file(path: Path, monkeypatch: pytest.MonkeyPatch,
                        connection: type[db.InboxConnection]) -> str:
    """What opening a new inbox file at ``path`` through ``connection`` is refused with."""
    monkeypatch.setattr(db, "InboxConnection", connection)
    with pytest.raises(DatabaseError) as refused:
        db.connect(path)
    return str(refused.value)


def test_a_new_file_a_newer_agentbox_takes_while_it_is_opened_is_refused_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inbox.sqlite3"
    assert refusal_of_new_file(path, monkeypatch, _RacedConnection).startswith(
        f"{path}: made by a newer agentbox")


class _NoWalConnection(db.InboxConnection):
    """A connection whose file cannot take WAL: SQLite then answers the mode it keeps."""

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        return super().execute("PRAGMA journal_mode" if sql == "PRAGMA journal_mode=WAL"
                               else sql, *args)


def test_a_file_that_cannot_take_wal_is_refused_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inbox.sqlite3"
    assert refusal_of_new_file(path, monkeypatch, _NoWalConnection) == (
        f"{path}: cannot switch the database to WAL mode")


def test_an_empty_existing_file_becomes_an_inbox(tmp_path: Path) -> None:
    path = tmp_path / "touched.sqlite3"
    path.touch()
    with sqlite_store(path) as store:
        assert store.ingest("s", "1", "{}", T0).outcome == "stored"


def test_wal_full_sync_and_busy_timeout_are_in_force(store: Store) -> None:
    assert store.engine.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.engine.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    conn = store.engine.conn
    store.status()  # a read waits for a lock by SQLite's busy handler
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_S * 1000


def test_a_write_turns_the_busy_handler_off_once_and_a_read_back_on(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers wait in their own short steps (take_write_lock): the handler is set off
    at the first write and stays off for the next ones, not set twice per event."""
    conn = store.engine.conn
    store.ingest("s", "0", "{}", T0)
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
    pragmas: list[str] = []
    conn.set_trace_callback(lambda sql: pragmas.append(sql) if "PRAGMA" in sql else None)
    try:
        for n in range(1, 4):
            assert store.ingest("s", str(n), "{}", T0).outcome == "stored"
            assert store.ingest("s", str(n), "{}", T0).outcome == "duplicate"
    finally:
        conn.set_trace_callback(None)
    assert pragmas == []
    store.status()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == db.BUSY_TIMEOUT_S * 1000


def test_a_crash_inside_the_first_migration_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inbox.sqlite3"
    original = db._apply

    def apply_then_crash(conn: sqlite3.Connection, target: int) -> None:
        original(conn, target)  # every statement and the record ran...
        raise RuntimeError("power cut before COMMIT")

    monkeypatch.setattr(db, "_apply", apply_then_crash)
    with pytest.raises(RuntimeError):
        db.connect(path)
    assert versions(path) == (0, 0, [])
    assert tables(path) == set()

    monkeypatch.undo()
    with sqlite_store(path):
        pass
    assert versions(path) == (schema.SCHEMA_VERSION, db.APPLICATION_ID,
                              list(range(1, schema.SCHEMA_VERSION + 1)))


def test_a_killed_process_mid_migration_leaves_nothing(tmp_path: Path) -> None:
    """A real SIGKILL with the migration's transaction open: no half schema."""
    path = tmp_path / "inbox.sqlite3"
    script = (
        "import os, signal, sys\n"
        "from agentbox.backends.sqlite import db\n"
        "original = db._apply\n"
        "def apply_then_die(conn, target):\n"
        "    original(conn, target)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "db._apply = apply_then_die\n"
        "db.connect(sys.argv[1])\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], timeout=120,
                          capture_output=True)
    assert done.returncode == -9, done.stderr
    assert versions(path) == (0, 0, [])
    assert tables(path) == set()
    with sqlite_store(path) as store:
        assert store.ingest("s", "1", "{}", T0).outcome == "stored"
    assert versions(path)[2] == list(range(1, schema.SCHEMA_VERSION + 1))


def test_a_failing_later_migration_is_rolled_back_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inbox.sqlite3"
    with sqlite_store(path) as store:
        store.ingest("s", "1", "{}", T0)
    before = versions(path)
    broken = "CREATE TABLE extra (x INTEGER);\nINSERT INTO no_such_table VALUES (1);\n"
    monkeypatch.setattr(db, "MIGRATIONS", (*schema.MIGRATIONS, broken))
    monkeypatch.setattr(db, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    with pytest.raises(DatabaseError):
        db.connect(path)
    assert versions(path) == before
    assert "extra" not in tables(path)

    fixed = "CREATE TABLE extra (x INTEGER);\nINSERT INTO extra VALUES (1);\n"
    monkeypatch.setattr(db, "MIGRATIONS", (*schema.MIGRATIONS, fixed))
    for _ in range(2):
        db.connect(path).close()
    assert versions(path) == (schema.SCHEMA_VERSION + 1, db.APPLICATION_ID,
                              list(range(1, schema.SCHEMA_VERSION + 2)))
    with raw(path) as conn:
        assert conn.execute("SELECT x FROM extra").fetchall() == [(1,)]  # ran once


def test_a_file_from_a_newer_agentbox_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    with sqlite_store(path) as store:
        store.ingest("s", "1", "{}", T0)
    conn = raw(path)
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    before = fingerprint(path)
    with pytest.raises(DatabaseError) as refused:
        sqlite_store(path)
    assert str(refused.value) == (
        f"{path}: made by a newer agentbox (schema {schema.SCHEMA_VERSION + 1}, this one "
        f"knows up to {schema.SCHEMA_VERSION}); upgrade agentbox to use it")
    assert fingerprint(path) == before


def test_a_foreign_sqlite_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = raw(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    before = fingerprint(path)
    with pytest.raises(DatabaseError) as refused:
        sqlite_store(path)
    assert str(refused.value) == f"{path}: an SQLite file, but not an agentbox database"
    assert fingerprint(path) == before
    with raw(path) as check:  # not even switched to WAL
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


@pytest.mark.parametrize(("app_id", "version"), [(1234, 1), (1234, 0), (0, 1)])
def test_an_sqlite_file_of_another_application_is_refused(
        tmp_path: Path, app_id: int, version: int) -> None:
    """Marked by another application, or versioned by one, even with no table yet: not
    a file to make an inbox in."""
    path = tmp_path / "other.db"
    conn = raw(path)
    conn.execute(f"PRAGMA application_id = {app_id}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    before = fingerprint(path)
    with pytest.raises(DatabaseError) as refused:
        sqlite_store(path)
    assert str(refused.value) == f"{path}: an SQLite file, but not an agentbox database"
    assert fingerprint(path) == before


@pytest.mark.parametrize("content", [
    b"this is a text file, not a database\n",
    bytes(range(256)) * 16,
    b"SQLite format 3\x00" + b"\xff" * 4080,
])
def test_garbage_is_refused_unchanged(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "inbox.sqlite3"
    path.write_bytes(content)
    with pytest.raises(DatabaseError):
        sqlite_store(path)
    assert path.read_bytes() == content


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError) as refused:
        sqlite_store(tmp_path)
    assert str(refused.value) == f"{tmp_path}: is a directory, not a database file"


def test_a_file_that_is_not_there_is_no_inbox_when_it_must_not_be_made(
        tmp_path: Path) -> None:
    path = tmp_path / "missing.sqlite3"
    with pytest.raises(NoInbox) as missing:
        db.connect(path, create=False)
    assert str(missing.value) == f"no inbox at {path}" and missing.value.location == str(path)
    assert not path.exists()


def test_writers_queue_on_the_busy_timeout(store: Store, tmp_path: Path) -> None:
    """BEGIN IMMEDIATE: a second writer waits for the first instead of failing."""
    other = sqlite_store(store.location)
    finished = threading.Event()
    results: list[str] = []

    def second_writer() -> None:
        results.append(other.ingest("s", "2", "{}", T0).outcome)
        finished.set()

    with db.write(store.engine.conn):
        store.engine.conn.execute("UPDATE inboxes SET instance = instance")
        thread = threading.Thread(target=second_writer)
        thread.start()
        assert not finished.wait(0.3)  # blocked behind our write lock
    assert finished.wait(60)
    thread.join()
    # The waiting was done in short steps; the connection's own timeout is back
    # for the next read.
    other.status()
    wait = other.engine.conn.execute("PRAGMA busy_timeout").fetchone()[0]
    assert wait == db.BUSY_TIMEOUT_S * 1000
    other.close()
    assert results == ["stored"]


@pytest.mark.parametrize("write", ["ingest", "transaction"])
def test_a_database_that_stays_locked_is_a_temporary_error(store: Store,
                                                           write: str) -> None:
    impatient = sqlite_store(store.location, busy_timeout=0.2)
    try:
        with db.write(store.engine.conn), pytest.raises(Busy) as caught:
            started = time.monotonic()
            if write == "ingest":  # a new key: one autocommit INSERT
                impatient.ingest("s", "1", "{}", T0)
            else:
                impatient.replay(None, T0)
        assert 0.2 <= time.monotonic() - started < 10  # its own timeout, not the default 30 s
        assert caught.value.exit_code == 75
        assert impatient.find("s", "1") is None
        assert impatient.engine.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 200
    finally:
        impatient.close()


def test_holder_ids_are_unique_and_name_host_and_process() -> None:
    ids = {new_holder_id() for _ in range(2000)}
    assert len(ids) == 2000
    host, pid, _ = next(iter(ids)).rsplit(":", 2)
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))


def test_a_version_1_inbox_keeps_its_stories_and_counts_through_version_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 1 wrote each event's "stored" entry as a history row and counted new
    events by trigger; version 2 reads the entry from the event and counts in code."""
    path = tmp_path / "inbox.sqlite3"
    with monkeypatch.context() as v1:
        v1.setattr(db, "SCHEMA_VERSION", 1)
        db.connect(path).close()
        with raw(path) as conn:  # as version 1 stored events: its triggers did the rest
            conn.executemany("INSERT INTO events (source, source_id, payload, created_at, "
                             "updated_at) VALUES ('s', ?, '{}', ?, ?)",
                             [("1", T0, T0), ("2", T0, T0)])
            conn.commit()
            assert conn.execute("SELECT COUNT(*) FROM history "
                                "WHERE action = 'stored'").fetchone() == (2,)
    with sqlite_store(path) as store:
        assert [e.action for e in store.story(1)] == ["stored"]
        assert store.status().events["pending"] == 2
        store.ingest("s", "3", "{}", T0 + 1)
        store.ingest_many([("s", "3", "{}"), ("s", "4", "{}")], T0 + 2)
        assert store.status().events["pending"] == 4
        assert [(e.at, e.action) for e in store.story(4)] == [(T0 + 2, "stored")]


def test_a_version_2_lease_goes_on_through_version_3(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 3 marks a released lease; one released before it keeps its old date."""
    path = tmp_path / "inbox.sqlite3"
    with monkeypatch.context() as v2:
        v2.setattr(db, "SCHEMA_VERSION", 2)
        db.connect(path).close()
        with raw(path) as conn:  # released by version 2: dated a second before the release
            conn.execute("INSERT INTO lease (one, holder, generation, until) "
                         "VALUES (1, 'old', 4, ?)", (T0 - 1,))
            conn.commit()
    with sqlite_store(path) as store:
        assert versions(path)[0] == schema.SCHEMA_VERSION
        lease = store.lease()
        assert lease is not None and (lease.generation, lease.until, lease.released) == (
            4, T0 - 1, False)
        assert store.acquire("new", T0, 60) == 5
        assert store.release("new", 5, T0)
        assert store.acquire("new", T0 - 3600, 60) == 6


def test_a_version_3_dispatch_in_flight_goes_on_through_version_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 4 records each claim's number of tries; older claims get the default."""
    path = tmp_path / "inbox.sqlite3"
    with monkeypatch.context() as v3:
        v3.setattr(db, "SCHEMA_VERSION", 3)
        db.connect(path).close()
        with raw(path) as conn:  # a dispatch whose dispatcher died under version 3
            conn.execute("INSERT INTO dispatches (key, mode, body, claimed_at, deadline) "
                         "VALUES ('k-1', 'at-least-once', 'hello', ?, ?)", (T0, T0 + 90))
            conn.execute("INSERT INTO outbox (body, state, dispatch_key, created_at) "
                         "VALUES ('hello', 'sending', 'k-1', ?)", (T0,))
            conn.commit()
    with sqlite_store(path) as store:
        found = store.claim_dispatch(T0 + 91, "at-least-once", 3600, 60)
        assert isinstance(found, Dispatch)
        assert (found.key, found.tries, found.max_tries) == ("k-1", 2, 5)


def test_a_version_4_inbox_keeps_its_timers_through_version_5(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 5 gives timers a cron expression and a zone; older timers have neither."""
    path = tmp_path / "inbox.sqlite3"
    with monkeypatch.context() as v4:
        v4.setattr(db, "SCHEMA_VERSION", 4)
        db.connect(path).close()
        with raw(path) as conn:
            conn.execute("INSERT INTO timers (name, due, every, payload, created_at) "
                         "VALUES ('digest', ?, 86400, '{}', ?)", (T0, T0))
            conn.commit()
    with sqlite_store(path) as store:
        [timer] = store.timers()
        assert (timer.name, timer.every, timer.cron, timer.tz) == ("digest", 86400, None, None)
        assert store.tick(T0) == 1 and store.timers()[0].due == T0 + 86400
    assert versions(path)[2] == list(range(1, schema.SCHEMA_VERSION + 1))
    with raw(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE timers SET cron = '0 8 * * *'")  # a cron timer names its zone


def test_opening_the_inbox_again_in_a_process_keeps_its_log_for_the_first(
        tmp_path: Path) -> None:
    """SQLite's locks belong to the process: a second open that read the file through a
    descriptor of its own, then closed it, would drop the locks the open connections
    hold, and another process would then take the log for abandoned."""
    path = tmp_path / "inbox.sqlite3"
    keeper = sqlite_store(path)  # as serve keeps one open while its threads open more
    keeper.ingest("chat", "before", "{}", T0)
    sqlite_store(path).close()  # a request's own connection, opened and closed

    def look() -> str:
        return subprocess.run(
            [sys.executable, "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1])"
             ".execute('SELECT source_id FROM events ORDER BY id').fetchall())", str(path)],
            check=True, capture_output=True, text=True).stdout

    look()  # another process opens and closes the file: it must not think itself alone
    assert keeper.ingest("chat", "after", "{}", T0 + 1).outcome == "stored"
    seen = look()
    keeper.close()
    assert seen.strip() == "[('before',), ('after',)]"
