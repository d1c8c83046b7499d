"""The messages a claim sends the server: the lock and what it reads go together, and
the claim itself goes with the COMMIT; a watcher's claim reads with them whether a
timer is due or a pause stands. So a handler starts two round trips after its watcher
woke, with its batch whole (events, keys, state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.location import open_engine
from agentbox.rules.policy import Policy
from agentbox.rules.records import IngestResult
from support.clock import T0
from support.postgres import statements

pytestmark = pytest.mark.postgres_only
TTL = 600


@pytest.fixture
def sent(store: Store) -> Iterator[list[str]]:
    """Every message the store's connection sends from now on."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    messages: list[str] = []
    execute = conn.execute

    def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
        messages.append(str(query))
        return execute(query, *args, **kwargs)

    conn.execute = counted
    yield messages
    del conn.execute


def test_a_store_on_an_open_engine_asks_the_server_nothing(
        store: Store, pg_url: str) -> None:
    """The engine found its inbox's row as it opened: the store made on it (each ingest
    process makes one) sends no message before its first statement."""
    engine: Any = open_engine(pg_url, "alice")
    messages: list[str] = []
    engine.conn.execute = lambda query, *args, **kwargs: messages.append(str(query))
    try:
        assert Store(engine).inbox_id == store.inbox_id
        assert messages == []
    finally:
        del engine.conn.execute
        engine.close()


def test_a_claim_is_two_round_trips_and_stands(store: Store, sent: list[str]) -> None:
    policy = Policy(lease_ttl=TTL, max_batch=2)
    first, second, third = (store.ingest("s", k, "{}", T0).id for k in "abc")
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    claimed = store.claim("w", generation, T0, policy)
    assert claimed is not None and [e.id for e in claimed] == [first, second]
    assert len(sent) == 2, sent
    begun = [s for s in statements(sent[0]) if not s.startswith("PREPARE")]
    assert begun[0] == "BEGIN" and sent[-1].rstrip().endswith("COMMIT")
    assert [(e.status, e.attempts, e.claim_gen) for e in claimed] == [
        ("running", 1, generation)] * 2
    assert [e.action for e in store.story(first)] == ["stored", "claimed"]
    assert store.story(first)[1].detail == "attempt 1"
    assert store.status().events["running"] == 2
    event = store.event(third)
    assert event is not None and event.status == "pending"


def test_an_empty_claim_is_two_round_trips(store: Store, sent: list[str]) -> None:
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    assert store.claim("w", generation, T0, Policy(lease_ttl=TTL)) == []
    assert len(sent) == 2, sent



def test_a_watcher_s_run_takes_its_whole_batch_in_two_round_trips(
        store: Store, sent: list[str]) -> None:
    """take: the pass and the gate read with the claim's lock (nothing due, no pause), the
    claim itself with the COMMIT, handing the events' keys and the state with them:
    nothing more is asked of the server before the handler starts."""
    policy = Policy(lease_ttl=TTL)
    stored = store.ingest("s", "a", "{}", T0).id
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    fired, paused, claimed = store.take("w", generation, T0, (T0, T0 + 86_400), policy)
    assert len(sent) == 2, sent
    assert (fired, paused) == (0, None)
    assert claimed is not None and [e.id for e in claimed] == [stored]
    assert claimed.keys == {stored: f"{store.instance_id()}-event-{stored}"}
    assert claimed.state == store.state()


def test_a_due_timer_costs_a_watcher_s_run_its_pass_first(
        store: Store, sent: list[str]) -> None:
    """A timer due: the claim is given up unwritten (its lock read and a ROLLBACK), the
    pass fires the timer, and the claim made after it hands over the timer's event."""
    from agentbox.rules.timers import TimerSpec

    policy = Policy(lease_ttl=TTL)
    store.add_timer(TimerSpec(name="tick", due=T0, every=None), T0)
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    fired, paused, claimed = store.take("w", generation, T0, (T0, T0 + 86_400), policy)
    assert (fired, paused) == (1, None)
    assert statements(sent[1])[0] == "ROLLBACK", sent  # and DEALLOCATE ALL with it
    assert claimed is not None and [e.source_id for e in claimed] == [f"tick@{T0}"]


def test_a_watcher_s_run_reads_once_then_claims_its_whole_batch_in_two(
        store: Store, sent: list[str]) -> None:
    """ready (timers, pause) in one read; the claim in two, handing the events' keys and
    the state with them: nothing more is asked of the server before the handler starts."""
    from agentbox.ledger.store import Ready

    policy = Policy(lease_ttl=TTL)
    stored = store.ingest("s", "a", "{}", T0).id
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    assert store.ready(T0, (T0, T0 + 86_400), policy) == Ready(0, None)
    claimed = store.claim("w", generation, T0, policy)
    assert len(sent) == 3, sent
    assert claimed is not None and [e.id for e in claimed] == [stored]
    assert claimed.keys == {stored: f"{store.instance_id()}-event-{stored}"}
    assert claimed.state == store.state()


def test_a_redelivery_is_one_round_trip(store: Store, sent: list[str]) -> None:
    """The statement that would store the event reads the one standing under its key:
    a duplicate, and a conflict's judgement, need no second look."""
    stored = store.ingest("s", "a", '{"n":1}', T0).id
    sent.clear()
    assert store.ingest("s", "a", '{ "n" : 1 }', T0 + 1) == IngestResult(
        "duplicate", stored, "s", "a")
    assert len(sent) == 1, sent
    sent.clear()
    assert store.ingest("s", "a", '{"n":2}', T0 + 2).outcome == "conflict"
    assert len(sent) == 2, sent  # the storing statement, then its note in a transaction
    assert "BEGIN" not in statements(sent[0]) and "BEGIN" in statements(sent[1]), sent
    assert [e.action for e in store.story(stored)] == ["stored", "conflict"]


def test_an_event_committed_after_the_storing_statement_began_is_looked_up_again(
        store: Store, pg_url: str, sent: list[str]) -> None:
    """Another session's uncommitted event under the key: the storing statement waits
    for it, and once it commits finds the key taken but cannot see its event (its
    snapshot is older), so it returns nothing; the ingest looks again and answers a
    duplicate of that event."""
    import threading

    from agentbox.backends.postgres.engine import _STORE
    from support.postgres import own_session

    store.ingest("s", "before", "{}", T0)
    sent.clear()
    answers: list[IngestResult] = []
    with own_session(pg_url) as other:
        row = other.execute(_STORE, {"box": store.inbox_id, "source": "s", "source_id": "k",
                                     "payload": '{"n":1}', "now": T0}).fetchone()
        assert row is not None and row[1] is None
        ingest = threading.Thread(
            target=lambda: answers.append(store.ingest("s", "k", '{"n":1}', T0 + 1)))
        ingest.start()
        ingest.join(0.5)
        assert ingest.is_alive() and answers == []  # waiting on the other session's row
    ingest.join(30)
    assert answers == [IngestResult("duplicate", int(row[0]), "s", "k")]
    assert len(sent) > 1 and sent[1] != sent[0], sent  # the first statement found nothing
