"""Looking after an SQLite inbox file: handing freed pages back, its size on disk, and
the file's own health checks, each read back from the file itself."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from agentbox.backends.sqlite import upkeep
from agentbox.backends.sqlite.schema import SCHEMA_VERSION
from agentbox.ledger.store import Store
from agentbox.rules.retention import cutoffs
from support.clock import T0
from support.fixtures import Opener
from support.store import POLICY

pytestmark = pytest.mark.sqlite_file

LATER = T0 + 10**8  # everything finished at T0 is past every keep by then


def conn_of(store: Store) -> sqlite3.Connection:
    return store.engine.current()  # type: ignore[attr-defined,no-any-return]


def pragma(store: Store, name: str) -> int:
    return int(conn_of(store).execute(f"PRAGMA {name}").fetchone()[0])


def freed(store: Store, n: int = 300) -> int:
    """``n`` finished events with long payloads, pruned: the free pages they leave."""
    for i in range(n):
        store.ingest("hook", str(i), '{"text": "%s"}' % ("x" * 500), T0)
    store.acquire("A", T0, 3600)
    while batch := store.claim("A", 1, T0, POLICY):
        assert store.finish("A", 1, T0, [e.id for e in batch])
    while store.prune_step(cutoffs(LATER, POLICY), 1000).events:
        pass
    pages = pragma(store, "freelist_count")
    assert pages > 10
    return pages


def test_free_pages_are_handed_back_within_each_budget_then_the_log(store: Store) -> None:
    assert pragma(store, "auto_vacuum") == 2  # incremental: every new inbox can shrink
    pages = freed(store)
    assert store.reclaim(3) == 3
    wait = pragma(store, "busy_timeout")  # the store's own, as upkeep waits for locks
    assert pragma(store, "freelist_count") == pages - 3
    assert store.reclaim(10**6) == pages - 3
    assert pragma(store, "freelist_count") == 0
    assert os.path.getsize(f"{store.location}-wal") > 0
    assert store.reclaim(10**6) == 0  # nothing left to free: the log is cut back instead
    assert os.path.getsize(f"{store.location}-wal") == 0
    assert pragma(store, "busy_timeout") == wait  # the checkpoint's short wait was undone


def test_a_file_made_without_incremental_vacuum_reuses_its_pages_instead(
        store: Store) -> None:
    conn = conn_of(store)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    assert pragma(store, "auto_vacuum") == 0
    pages = freed(store)
    assert store.reclaim(10**6) == 0
    assert pragma(store, "freelist_count") == pages


def test_the_log_is_left_alone_while_a_reader_needs_it(
        store: Store, open_inbox: Opener) -> None:
    store.ingest("hook", "1", "{}", T0)
    assert store.reclaim(10**6) == 0
    wait = pragma(store, "busy_timeout")
    assert wait >= 1000
    reader = conn_of(open_inbox())
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM events").fetchone()  # holds a snapshot
    store.ingest("hook", "2", "{}", T0)
    began = time.monotonic()
    assert store.reclaim(10**6) == 0
    waited = time.monotonic() - began
    assert upkeep.CHECKPOINT_WAIT_MS / 1000 * 0.9 <= waited < wait / 1000 / 2  # a moment
    assert os.path.getsize(f"{store.location}-wal") > 0  # skipped, not waited for
    assert pragma(store, "busy_timeout") == wait
    reader.execute("COMMIT")
    assert store.reclaim(10**6) == 0
    assert os.path.getsize(f"{store.location}-wal") == 0


def test_the_bytes_on_disk_are_the_file_and_its_log(store: Store) -> None:
    store.ingest("hook", "1", "{}", T0)
    size = os.path.getsize(store.location) + os.path.getsize(f"{store.location}-wal")
    assert os.path.getsize(f"{store.location}-wal") > 0
    assert store.vitals().bytes == size
    assert upkeep.disk_bytes(str(Path(store.location).with_name("gone.sqlite3"))) == 0


def checks_of(store: Store) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.detail) for c in store.checks()}


def test_a_healthy_file_says_why_each_check_passed(store: Store) -> None:
    store.ingest("hook", "1", "{}", T0)
    os.chmod(store.location, 0o600)
    found = checks_of(store)
    assert found["integrity"] == (True, "quick_check found no damage")
    assert found["schema"] == (True, f"version {SCHEMA_VERSION}, every migration recorded")
    log = os.path.getsize(f"{store.location}-wal")
    assert log > 0
    assert found["wal"] == (True, f"write-ahead log is {log:,} bytes")
    assert found["permissions"][0]
    assert list(found) == ["integrity", "schema", "permissions", "wal"]


def test_a_file_others_may_read_fails_the_permissions_check(store: Store) -> None:
    os.chmod(store.location, 0o644)
    ok, detail = checks_of(store)["permissions"]
    assert not ok and store.location in detail


def test_a_side_file_others_may_read_fails_it_too(store: Store) -> None:
    store.ingest("hook", "1", "{}", T0)
    os.chmod(f"{store.location}-wal", 0o644)
    ok, detail = checks_of(store)["permissions"]
    assert not ok and f"{store.location}-wal" in detail


def test_a_schema_of_another_version_fails_the_schema_check(store: Store) -> None:
    conn = conn_of(store)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    ok, detail = checks_of(store)["schema"]
    applied = list(range(1, SCHEMA_VERSION + 1))
    assert (ok, detail) == (False, f"version {SCHEMA_VERSION + 1} with migrations {applied}; "
                                   f"this agentbox expects {SCHEMA_VERSION}")


def test_a_migration_missing_from_the_record_fails_the_schema_check(store: Store) -> None:
    conn = conn_of(store)
    conn.execute("DELETE FROM migrations WHERE version = 1")
    ok, detail = checks_of(store)["schema"]
    assert not ok and detail.startswith(f"version {SCHEMA_VERSION} with migrations [2, ")


def test_an_unreadable_record_of_migrations_fails_the_schema_check(store: Store) -> None:
    conn = conn_of(store)
    conn.execute("ALTER TABLE migrations RENAME TO migrations_gone")
    assert checks_of(store)["schema"] == (
        False, "cannot read the schema version: no such table: migrations")


def quick_check(rows: list[str] | sqlite3.DatabaseError) -> sqlite3.Connection:
    """A connection whose ``PRAGMA quick_check`` answers ``rows``, or fails with that
    error: damage of several kinds at once is not made to order in a real file."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE answer (line TEXT)")
    if isinstance(rows, list):
        conn.executemany("INSERT INTO answer VALUES (?)", [(r,) for r in rows])

    class Answering(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
            if sql == "PRAGMA quick_check":
                if isinstance(rows, sqlite3.DatabaseError):
                    raise rows
                return conn.execute("SELECT line FROM answer ORDER BY rowid")
            return conn.execute(sql, *args)  # type: ignore[arg-type]

    return Answering(":memory:")


def test_damage_is_shown_up_to_three_problems_and_their_number() -> None:
    one = upkeep.checks(quick_check(["page 3 is never used"]), ":memory:")[0]
    assert (one.name, one.ok, one.detail) == ("integrity", False, "page 3 is never used")
    many = upkeep.checks(quick_check([f"problem {n}" for n in range(1, 6)]), ":memory:")[0]
    assert many.detail == "problem 1; problem 2; problem 3; … (5 problems)"
    three = upkeep.checks(quick_check(["a", "b", "c"]), ":memory:")[0]
    assert three.detail == "a; b; c"
    four = upkeep.checks(quick_check(["a", "b", "c", "d"]), ":memory:")[0]
    assert four.detail == "a; b; c; … (4 problems)"


def test_a_quick_check_that_cannot_finish_fails_the_integrity_check_saying_why() -> None:
    failed = sqlite3.DatabaseError("database disk image is malformed")
    assert upkeep.checks(quick_check(failed), ":memory:")[0] == (
        "integrity", False, "quick_check could not finish: database disk image is malformed")


def test_a_corrupt_page_fails_the_integrity_check(store: Store, open_inbox: Opener) -> None:
    for n in range(2000):
        store.ingest("hook", str(n), '{"text": "%s"}' % ("x" * 200), T0)
    store.close()  # its last close checkpoints the log into the file
    size = os.path.getsize(store.location)
    assert size > 100 * 4096 and not os.path.exists(f"{store.location}-wal")
    with open(store.location, "r+b") as fh:  # a page in the middle of the events table
        fh.seek((size // 4096 // 2) * 4096)
        fh.write(b"\xff" * 4096)
    ok, detail = checks_of(open_inbox())["integrity"]
    assert not ok and detail and detail != "quick_check found no damage"
