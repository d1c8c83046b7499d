"""A PostgreSQL write transaction as the ledger sees it: what it sends and when, what a
failure undoes, and how each failure names the inbox.

Writes wait and go out with the next read or the COMMIT; a transaction's last statement
carries the COMMIT. So a write's many rows are one statement where they can be, nothing
is sent after the last statement, a transaction that sent nothing has nothing to undo,
and one that failed half way is rolled back, its connection left idle for the next.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import pytest
from psycopg.pq import TransactionStatus

from agentbox.backends.postgres import db
from agentbox.errors import Busy
from agentbox.ledger import history
from agentbox.ledger.inbox import store_in
from agentbox.ledger.store import Store
from support.clock import T0, TTL
from support.postgres import (
    GAVE_UP,
    LOCK_TIMEOUT_S,
    own_session,
    schema_rows,
    statement_name,
    statements,
    table_locked,
)
from support.store import POLICY

pytestmark = pytest.mark.postgres_only

# A detail with per cent signs: a value written into a statement is not read as a
# parameter.
NOTED = [{"at": T0, "subject": "event", "subject_id": str(n), "action": "noted",
          "generation": None, "detail": detail}
         for n, detail in enumerate(["a", "b, (c)", "100% %s %(x)s"])]
# The ledger's own history INSERT, and two spellings its fast path must not misread:
# a VALUES before the last one, and a last VALUES group followed by more SQL.
CTE_FIRST = ("WITH kinds (subject) AS (VALUES ('event')) " + history._INSERT)
ON_CONFLICT = history._INSERT + " ON CONFLICT DO NOTHING"


class Interrupted(Exception):
    """Raised by a test inside a transaction's block, as a failing caller would."""


@contextmanager
def row_locked(url: str, query: str) -> Iterator[None]:
    """The rows ``query`` selects held FOR UPDATE by another session until the block
    ends: a writer of those rows waits for them."""
    with own_session(url) as conn:
        assert conn.execute(f"{query} FOR UPDATE").fetchall()
        yield


def noted_rows(store: Store) -> list[tuple[str, str, str]]:
    return [(str(i), str(a), str(d)) for i, a, d in store._read().rows(
        """SELECT subject_id, action, detail FROM history
           WHERE inbox_id = :box AND action = 'noted' ORDER BY id""")]


def inserts(sent: list[str]) -> int:
    """INSERT statements the connection executed, whatever messages carried them, and
    whether written out or prepared (and executed by name)."""
    sent_statements = [s for message in sent for s in statements(message)]
    prepared = {statement_name(s) for s in sent_statements
                if s.startswith("PREPARE") and "INSERT INTO history" in s}
    return sum(statement_name(s) in prepared
               if s.startswith("EXECUTE") else s.count("INSERT INTO history")
               for s in sent_statements if not s.startswith("PREPARE"))


def idle(store: Store) -> bool:
    return store.engine.conn.info.transaction_status == TransactionStatus.IDLE


@pytest.mark.parametrize(("sql", "statements"), [
    (history._INSERT, 1), (CTE_FIRST, 1), (ON_CONFLICT, len(NOTED))],
    ids=["one-values-group", "values-before-the-last", "sql-after-the-group"])
def test_a_write_over_many_rows_stores_each_row_once_in_as_few_statements_as_it_can(
        store: Store, sent: list[str], sql: str, statements: int) -> None:
    """An INSERT ending in one VALUES group is sent as one statement of every row (a
    copy of a big inbox); any other shape is sent once per row, never mangled."""
    sent.clear()
    with store._write() as tx:
        tx.many(sql, NOTED)
    assert inserts(sent) == statements
    assert noted_rows(store) == [(r["subject_id"], "noted", r["detail"]) for r in NOTED]


@pytest.mark.parametrize("fails_after_last", [False, True], ids=["ends", "raises"])
def test_nothing_is_sent_after_a_transactions_last_statement(
        store: Store, sent: list[str], fails_after_last: bool) -> None:
    """The last statement carries the COMMIT: the block's end sends no second COMMIT,
    and an error raised after it finds nothing to roll back and sends no ROLLBACK."""
    sent.clear()
    with pytest.raises(Interrupted) if fails_after_last else nullcontext(), \
            store._write() as tx:
        tx.many(history._INSERT, NOTED[:1])
        assert tx.last("SELECT COUNT(*) FROM history WHERE inbox_id = :box") == [(1,)]
        if fails_after_last:
            raise Interrupted
    assert len(sent) == 1
    assert noted_rows(store) == [("0", "noted", "a")] and idle(store)


@pytest.mark.parametrize("after", ["write", "read"])
def test_a_statement_after_the_last_is_refused_not_committed_alone(
        store: Store, after: str) -> None:
    """After its last statement the transaction is over: a write queued then would go
    out on its own, outside it, and a read would see what it did from outside it."""
    with pytest.raises(AssertionError, match=r"^a statement after the transaction's last$"), \
            store._write() as tx:
        tx.last("SELECT 1")
        if after == "write":
            tx.many(history._INSERT, NOTED[:1])
        else:
            tx.rows("SELECT COUNT(*) FROM history WHERE inbox_id = :box")
    assert noted_rows(store) == [] and idle(store)


def test_an_event_stored_inside_a_transaction_is_undone_with_it(store: Store) -> None:
    """A timer's or an approval's event is stored by its transaction, not beside it: a
    transaction that fails takes the event (and its tally) with it."""
    with pytest.raises(Interrupted), store._write() as tx:
        assert store_in(store.engine, tx, "timer", "t1", "{}", T0).outcome == "stored"
        raise Interrupted
    assert store.find("timer", "t1") is None
    assert store.status().events["pending"] == 0 and idle(store)


def test_an_ingest_kept_from_the_events_table_is_busy_naming_the_inbox(
        impatient: Store, pg_url: str) -> None:
    """The one statement that stores an event, kept waiting past the lock timeout."""
    with table_locked(pg_url, "events"), pytest.raises(Busy) as gave_up:
        impatient.ingest("hook", "late", "{}", T0)
    assert str(gave_up.value) == f"{impatient.location}: {GAVE_UP}"
    assert impatient.find("hook", "late") is None


def claim_kept_from_the_inboxs_lock(store: Store, url: str) -> tuple[int, int, Busy]:
    """(the event, the lease's generation, the Busy) of a claim whose first message (the
    lock read and the candidates, sent together) waited on the inbox's row too long."""
    stored = store.ingest("hook", "1", "{}", T0).id
    generation = store.acquire("W", T0, TTL)
    assert generation is not None
    with row_locked(url, "SELECT id FROM inboxes"), pytest.raises(Busy) as gave_up:
        store.claim("W", generation, T0, POLICY)
    return stored, generation, gave_up.value


def test_a_claim_kept_from_the_inboxs_lock_is_busy_naming_the_inbox(
        impatient: Store, pg_url: str) -> None:
    _, _, gave_up = claim_kept_from_the_inboxs_lock(impatient, pg_url)
    assert str(gave_up) == f"{impatient.location}: {GAVE_UP}"


def test_after_a_claim_kept_from_the_inboxs_lock_the_next_claim_claims(
        impatient: Store, pg_url: str) -> None:
    """A Busy claim is rolled back: the connection is idle, and a watcher's next claim
    (on the same connection) claims."""
    stored, generation, _ = claim_kept_from_the_inboxs_lock(impatient, pg_url)
    assert idle(impatient)
    assert [e.id for e in impatient.claim("W", generation, T0, POLICY) or []] == [stored]


def test_a_claim_whose_last_statement_fails_writes_none_of_its_rows(
        impatient: Store, pg_url: str) -> None:
    """The claim's reads went out (its transaction begun), its writes were queued, and
    its last statement waits on the event's row: Busy naming the inbox, and the
    rollback leaves the event pending with no claim in its story."""
    stored = impatient.ingest("hook", "1", "{}", T0).id
    generation = impatient.acquire("W", T0, TTL)
    assert generation is not None
    with row_locked(pg_url, "SELECT id FROM events"), pytest.raises(Busy) as gave_up:
        impatient.claim("W", generation, T0, POLICY)
    assert str(gave_up.value) == f"{impatient.location}: {GAVE_UP}"
    event = impatient.find("hook", "1")
    assert event is not None and (event.status, event.attempts) == ("pending", 0)
    assert [line.action for line in impatient.story(stored)] == ["stored"]
    assert idle(impatient)


def test_a_schema_another_session_holds_is_not_dropped_and_the_refusal_names_it(
        store: Store, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping a schema waits for every table in it; one held by another session past
    the lock timeout is Busy naming the database, and the schema stays whole."""
    monkeypatch.setattr(db, "session", functools.partial(db.session,
                                                          lock_timeout=LOCK_TIMEOUT_S))
    before = schema_rows(pg_url)
    with table_locked(pg_url, "events"), pytest.raises(Busy) as gave_up:
        db.drop_schema(store.engine.target)
    assert str(gave_up.value) == f"{store.location}: {GAVE_UP}"
    assert schema_rows(pg_url) == before
