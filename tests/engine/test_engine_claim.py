"""Rules 3 and 4 at claim time: batches, attempts, abandoned rows, poison and backoff."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.store import POLICY, MakeStepWorker, actions, event_state, every_row

LATER = TTL + 1  # enough for any lease taken now to lapse


def ingest(store: Store, *source_ids: str, now: int = T0) -> list[int]:
    return [store.ingest("chat", s, "{}", now).id for s in source_ids]


def test_a_claim_stamps_the_generation_and_counts_the_attempt(
        store: Store, worker: MakeStepWorker) -> None:
    ids = ingest(store, "m1", "m2")
    b = worker("B")
    store.acquire("A", T0, TTL)
    assert b.acquire(T0 + LATER) == 2
    got = b.claim(T0 + LATER)
    assert got is not None
    assert [e.id for e in got] == ids
    for event in got:
        assert (event.status, event.attempts, event.claim_gen) == ("running", 1, 2)
        assert event.updated_at == T0 + LATER
        assert store.event(event.id) == event
        entry = store.story(event.id)[-1]
        assert (entry.action, entry.generation, entry.detail) == ("claimed", 2, "attempt 1")


def test_a_batch_takes_every_pending_event_oldest_first(
        store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "m3", "m1", "m2")
    a = worker("A")
    a.acquire(T0)
    a.claim(T0)
    assert a.ids() == ["m3", "m1", "m2"]
    assert store.status().events["running"] == 3


def test_max_batch_bounds_a_run(store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "e1", "e2", "e3", "e4", "e5")
    a = worker("A", Policy(max_batch=2))
    a.acquire(T0)
    batches = []
    for n in range(4):
        a.claim(T0 + n)
        batches.append(a.ids())
        assert a.finish(T0 + n)
    assert batches == [["e1", "e2"], ["e3", "e4"], ["e5"], []]


def test_a_claim_without_the_lease_is_refused_and_changes_nothing(
        store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "m1")
    store.acquire("A", T0, TTL)
    before = every_row(store)
    assert store.claim("B", 1, T0, POLICY) is None             # not the holder
    assert store.claim("A", 2, T0, POLICY) is None             # not its generation
    assert store.claim("A", 1, T0 + LATER, POLICY) is None     # lapsed
    assert every_row(store) == before


def test_a_crashed_worker_still_used_up_an_attempt(
        store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "m1")
    a = worker("A")
    a.acquire(T0)
    a.claim(T0)  # ...and the process dies: no finish, no fail
    assert event_state(store, "m1") == ("running", 1)


def test_rows_of_an_older_generation_go_back_to_pending(
        store: Store, worker: MakeStepWorker) -> None:
    ids = ingest(store, "m1", "m2")
    a, b = worker("A"), worker("B")
    a.acquire(T0)
    a.claim(T0)  # A stalls
    b.acquire(T0 + LATER)
    b.claim(T0 + LATER)
    # both came back; the first is retried alone, the other waits its turn
    assert b.ids() == ["m1"]
    assert event_state(store, "m1") == ("running", 2)
    assert event_state(store, "m2") == ("pending", 1)
    m2 = store.event(ids[1])
    assert m2 is not None and m2.error is not None and "generation 1" in m2.error
    abandoned = store.story(ids[1])[-1]
    assert (abandoned.action, abandoned.generation) == ("abandoned", 1)


def test_rows_claimed_in_the_current_generation_stay_with_their_run(
        store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "m1")
    a = worker("A")
    a.acquire(T0)
    first = a.claim(T0)
    ingest(store, "m2", now=T0 + 1)
    a.acquire(T0 + 1)  # a renewal: same generation
    second = a.claim(T0 + 1)
    assert first is not None and second is not None
    assert [e.source_id for e in first] == ["m1"]
    assert [e.source_id for e in second] == ["m2"]
    assert event_state(store, "m1") == ("running", 1)


def test_an_exhausted_row_is_buried_dead_with_its_reason(
        store: Store, worker: MakeStepWorker) -> None:
    [poison] = ingest(store, "poison")
    now = T0
    for n in range(3):
        w = worker(f"W{n}")
        w.acquire(now)
        w.claim(now)
        assert w.ids() == ["poison"]  # and crashes
        now += LATER
    last = worker("W3")
    last.acquire(now)
    assert last.claim(now) == []
    event = store.event(poison)
    assert event is not None
    assert (event.status, event.attempts) == ("dead", 3)
    assert event.error is not None and event.error.startswith("too many attempts (3)")
    assert "lost its lease" in event.error  # the last error is kept
    assert actions(store, poison)[-2:] == ["abandoned", "dead"]
    assert store.story(poison)[-1].detail == "reached max_attempts 3"
    assert [e.id for e in store.dead()] == [poison]


def test_a_retried_row_is_claimed_alone_even_with_fresh_ones_waiting(
        store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "bad")
    a = worker("A")
    a.acquire(T0)
    a.claim(T0)
    assert a.fail(T0)  # back to pending, attempts 1
    ingest(store, "fresh1", "fresh2", now=T0 + 1)
    a.claim(T0 + 1)
    assert a.ids() == ["bad"]
    assert a.finish(T0 + 1)
    a.claim(T0 + 2)
    assert a.ids() == ["fresh1", "fresh2"]


def test_backoff_holds_a_retry_back_without_holding_up_healthy_events(
        store: Store, worker: MakeStepWorker) -> None:
    policy = Policy(max_attempts=5, retry_backoff=10, backoff_cap=25)
    [bad] = ingest(store, "bad")
    a = worker("A", policy)
    a.acquire(T0)
    waits = []
    now = T0
    for _ in range(4):
        a.claim(now)
        assert a.ids() == ["bad"]
        assert a.fail(now)
        event = store.event(bad)
        assert event is not None and event.status == "pending"
        waits.append(event.available_at - now)
        if len(waits) == 1:
            ingest(store, "healthy", now=now)
            a.claim(now + 1)  # the retry is not due: the healthy event goes ahead
            assert a.ids() == ["healthy"]
            assert a.finish(now + 1)
        a.claim(event.available_at - 1)
        assert a.ids() == []
        now = event.available_at
    assert waits == [10, 20, 25, 25]  # exponential, capped


def test_backoff_applies_to_abandoned_rows_too(store: Store, worker: MakeStepWorker) -> None:
    policy = Policy(retry_backoff=30)
    [m1] = ingest(store, "m1")
    a, b = worker("A", policy), worker("B", policy)
    a.acquire(T0)
    a.claim(T0)
    b.acquire(T0 + LATER)
    assert b.claim(T0 + LATER) == []
    event = store.event(m1)
    assert event is not None and (event.status, event.available_at) == ("pending",
                                                                        T0 + LATER + 30)
    assert b.claim(T0 + LATER + 30) is not None and b.ids() == ["m1"]


def test_done_and_dead_rows_are_never_claimed(store: Store, worker: MakeStepWorker) -> None:
    ingest(store, "done", "dead")
    a = worker("A", Policy(max_attempts=1))
    a.acquire(T0)
    a.claim(T0)
    a.batch = a.batch[:1]
    assert a.finish(T0)
    a.batch = []
    b = worker("B", Policy(max_attempts=1))
    b.acquire(T0 + LATER)
    assert b.claim(T0 + LATER) == []
    assert event_state(store, "done") == ("done", 1)
    assert event_state(store, "dead") == ("dead", 1)
