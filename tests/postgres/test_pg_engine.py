"""The PostgreSQL engine's own duties: its session as it was opened (durable or not, how
long it waits for a lock), an open that only reads making nothing, long reads streamed
in chunks from the server, its errors in agentbox's words, tallies rebuilt after a copy,
its own connection closed with it and a shared one left open by the inboxes served on
it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.backends.postgres import db
from agentbox.backends.postgres.url import parse
from agentbox.errors import Busy, DatabaseError, NoInbox, UsageError
from agentbox.ledger.store import Store
from agentbox.location import open_inboxes, open_store
from agentbox.upkeep import backup
from support.clock import T0
from support.fixtures import Opener
from support.postgres import GAVE_UP, LOCK_TIMEOUT_S, own_session, schema_rows, table_locked
from support.store import run, say

pytestmark = pytest.mark.postgres_only


def ingest_numbered(store: Store, count: int) -> None:
    store.ingest_many([("hook", str(n), "{}") for n in range(count)], T0)


def test_a_long_read_comes_in_chunks_of_the_size_asked(store: Store) -> None:
    """A backup holds one chunk of rows in memory at a time: the size is a bound."""
    ingest_numbered(store, 7)
    with store.engine.snapshot(store.inbox_id) as reader:
        chunks = [[row[0] for row in chunk] for chunk in reader.chunks(
            "SELECT source_id FROM events WHERE inbox_id = :box ORDER BY id", 3)]
    assert chunks == [["0", "1", "2"], ["3", "4", "5"], ["6"]]


def test_a_long_read_streams_from_the_server_and_its_failure_is_translated(
        store: Store) -> None:
    """The rows come from a cursor on the server, a chunk per fetch: those before a
    failing row arrive before its error (a read fetched whole would fail at once), and
    the error names the inbox in agentbox's words."""
    arrived: list[list[int]] = []
    with pytest.raises(DatabaseError) as failed, store.engine.snapshot(store.inbox_id) as reader:
        for chunk in reader.chunks("SELECT 10 / (5 - n) FROM generate_series(1, 7) n", 2):
            arrived.append([row[0] for row in chunk])
    assert arrived == [[2, 3], [5, 10]]
    assert str(failed.value) == f"{store.location}: database error: division by zero"


def test_a_backup_that_cannot_read_a_table_in_time_is_busy_and_writes_nothing(
        impatient: Store, pg_url: str, tmp_path: Path) -> None:
    """A table held by another session stops the backup's chunked read of it after the
    lock timeout: Busy (try again), naming the inbox, and no half-written copy."""
    ingest_numbered(impatient, 3)
    dest = tmp_path / "copy.sqlite3"
    with table_locked(pg_url, "history"), pytest.raises(Busy) as gave_up:
        backup(impatient, str(dest))
    assert str(gave_up.value) == f"{impatient.location}: {GAVE_UP}"
    assert list(tmp_path.iterdir()) == []


def test_a_batch_that_cannot_store_in_time_is_busy_and_stores_nothing(
        impatient: Store, pg_url: str) -> None:
    """The batch's one statement, kept from the events table past the lock timeout, is
    Busy naming the inbox; the batch is all or nothing."""
    ingest_numbered(impatient, 1)
    with table_locked(pg_url, "events"), pytest.raises(Busy) as gave_up:
        impatient.ingest_many([("hook", "late", "{}"), ("hook", "later", "{}")], T0)
    assert str(gave_up.value) == f"{impatient.location}: {GAVE_UP}"
    assert [e.source_id for e in impatient.events(limit=10)] == ["0"]


def test_a_read_kept_from_its_table_is_busy_naming_the_inbox(
        impatient: Store, pg_url: str) -> None:
    """A read outside any transaction (the lease's one row) waits no longer than the
    lock timeout either, and says which inbox."""
    ingest_numbered(impatient, 1)
    with table_locked(pg_url, "inboxes"), pytest.raises(Busy) as gave_up:
        impatient.lease()
    assert str(gave_up.value) == f"{impatient.location}: {GAVE_UP}"


@pytest.mark.parametrize(("durable", "busy_timeout", "settings"), [
    (True, None, ("on", "30s")), (False, 0.25, ("off", "250ms")), (True, 0, ("on", "1ms"))])
def test_a_stores_session_commits_and_waits_for_locks_as_it_was_opened_to(
        pg_url: str, durable: bool, busy_timeout: float | None,
        settings: tuple[str, str]) -> None:
    """A durable store's commits wait for the disk, a scratch one's do not; a lock is
    waited for 30 s unless the store was opened to give up sooner (at once: a
    millisecond, as PostgreSQL's 0 would wait for ever)."""
    with open_store(pg_url, "alice", durable=durable, busy_timeout=busy_timeout) as store:
        conn = store.engine.conn  # type: ignore[attr-defined]
        assert (conn.execute("SHOW synchronous_commit").fetchone()[0],
                conn.execute("SHOW lock_timeout").fetchone()[0]) == settings


def test_a_session_names_itself_and_ends_a_transaction_left_idle(pg_url: str) -> None:
    """The server lists it as agentbox's (unless the URL names it otherwise) and ends it
    if it stays inside a transaction for 15 s, freeing the inbox's lock; it works in
    the URL's schema."""
    target = parse(pg_url)
    for url, name in ((pg_url, "agentbox"), (f"{pg_url}&application_name=pool%201", "pool 1")):
        with db.session(parse(url)) as conn:
            shown = [conn.execute(f"SHOW {setting}").fetchone()[0] for setting in (
                "application_name", "idle_in_transaction_session_timeout", "search_path")]
            assert shown == [name, "15s", target.schema]


def test_opening_an_inbox_that_is_not_there_only_to_read_makes_nothing(
        open_inbox: Opener, pg_url: str) -> None:
    """With no schema yet, and then with another user's inbox in it: NoInbox, naming
    what is missing, and the schema as it was."""
    with pytest.raises(NoInbox) as missing:
        open_store(pg_url, "alice", create=False)
    assert str(missing.value) == f"no inbox at {pg_url}"
    assert schema_rows(pg_url) is None
    open_inbox("bob").ingest("hook", "1", "{}", T0)
    before = schema_rows(pg_url)
    with pytest.raises(NoInbox) as missing:
        open_store(pg_url, "alice", create=False)
    assert str(missing.value) == f"no inbox at {pg_url} (user alice)"
    assert schema_rows(pg_url) == before
    with open_store(pg_url, "bob", create=False) as bob:
        assert bob.find("hook", "1") is not None
    assert schema_rows(pg_url) == before


def test_opening_an_inbox_that_is_there_writes_nothing(
        open_inbox: Opener, pg_url: str, sent: list[str]) -> None:
    """Its row is read, not written again: an open costs no write, and takes no number
    from the inboxes' sequence."""
    open_inbox("alice").ingest("hook", "1", "{}", T0)
    sent.clear()
    with open_store(pg_url, "alice"):
        pass
    assert [m for m in sent if "INSERT" in m.upper()] == []


def test_an_inbox_made_by_two_openers_at_once_is_one_inbox(
        open_inbox: Opener, pg_url: str) -> None:
    """The second to make it finds the first one's row (their INSERTs race on the name):
    one id, one row."""
    open_inbox("bob").ingest("hook", "1", "{}", T0)  # the schema, made
    with db.session(parse(pg_url)) as conn:
        made = db.create_inbox(conn, "alice")
        assert db.create_inbox(conn, "alice") == made
        assert conn.execute("SELECT COUNT(*) FROM inboxes WHERE name = 'alice'"
                            ).fetchone()[0] == 1
    with open_store(pg_url, "alice", create=False) as alice:
        assert alice.inbox_id == made


def test_an_open_kept_from_the_inboxes_is_busy_naming_the_inbox(
        open_inbox: Opener, pg_url: str) -> None:
    open_inbox("alice").ingest("hook", "1", "{}", T0)
    with table_locked(pg_url, "inboxes"), pytest.raises(Busy) as gave_up:
        open_store(pg_url, "alice", busy_timeout=LOCK_TIMEOUT_S)
    assert str(gave_up.value) == f"{pg_url}: {GAVE_UP}"


@pytest.mark.parametrize("create", [True, False])
def test_a_server_that_is_not_there_is_one_line_naming_the_url_without_its_password(
        create: bool) -> None:
    with pytest.raises(DatabaseError) as refused:
        open_store("postgresql://postgres:hunter2@127.0.0.1:1/test", "alice", create=create)
    assert str(refused.value) == (
        "postgresql://postgres@127.0.0.1:1/test: cannot connect to PostgreSQL: "
        "Connection refused")


def test_a_recount_rebuilds_every_tally_from_the_rows(store: Store, pg_url: str) -> None:
    """The tallies the statements keep can be set again from the rows themselves (what
    a copy needs, its rows written past those statements): every state of every table."""
    ingest_numbered(store, 3)
    run(store, "agent", T0 + 10)
    say(store, T0 + 11, "hello")
    store.ingest("hook", "late", "{}", T0 + 12)
    truth = store.status()
    assert (truth.events["done"], truth.events["pending"], sum(truth.outbox.values())) == (
        3, 1, 1)
    with own_session(pg_url) as conn:
        conn.execute("UPDATE state_counts SET n = n + 5")
    assert store.status() != truth
    with store._write() as tx:
        store.engine.recount(tx)
    assert store.status() == truth


def test_closing_an_inbox_served_on_a_shared_connection_leaves_it_open(
        open_inbox: Opener, pg_url: str) -> None:
    """A pool serves every inbox of a schema on one connection: an inbox it closes must
    not close that connection under the others."""
    for user in ("alice", "bob"):
        open_inbox(user).ingest("hook", user, "{}", T0)
    inboxes = open_inboxes(pg_url)
    try:
        inboxes.store("alice").close()
        assert inboxes.store("bob").status().events["pending"] == 1
        assert inboxes.users() == ["alice", "bob"]
    finally:
        inboxes.close()


def test_closing_a_store_closes_the_connection_it_opened(store: Store) -> None:
    store.ingest("hook", "1", "{}", T0)
    conn = store.engine.conn  # type: ignore[attr-defined]
    store.close()
    assert conn.closed
    with pytest.raises(DatabaseError):
        store.status()


def test_a_transaction_of_another_engine_is_refused_by_name(
        store: Store, tmp_path: Path) -> None:
    """Handing the engine a transaction it did not open is a programming error that
    says what went wrong, not an AttributeError deep inside."""
    with open_store(tmp_path / "other.sqlite3", "alice") as other, other._write() as tx, \
            pytest.raises(AssertionError, match=r"^a transaction of another engine$"):
        store.engine.store_events(tx, [("hook", "1", "{}")], T0)


def test_a_session_keeps_the_url_s_own_options_and_bounds_its_connect(pg_url: str) -> None:
    """Settings of the URL's own (``options``) are kept beside agentbox's, and a server
    that does not answer is given up on after CONNECT_TIMEOUT_S."""
    url = f"{pg_url}&options=-c%20statement_timeout%3D12345"
    with db.session(parse(url)) as conn:
        shown = conn.execute("SHOW statement_timeout").fetchone()
        assert shown is not None and shown[0] == "12345ms"
        assert conn.info.get_parameters()["connect_timeout"] == str(db.CONNECT_TIMEOUT_S)


def test_a_url_the_driver_cannot_read_is_a_usage_error_naming_it(pg_url: str) -> None:
    url = f"{pg_url}&bogus_option=1"
    with pytest.raises(UsageError) as refused:
        db.session(parse(url))
    assert str(refused.value) == (f"{parse(url).location}: not a usable PostgreSQL URL: "
                                  'invalid URI query parameter: "bogus_option"')
