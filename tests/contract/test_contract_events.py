"""Store contract: listing events with filters and keyset pages, and an inbox's vitals."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.store import run


def ids(events: list) -> list[int]:
    return [e.id for e in events]


def fill(store: Store) -> dict[str, int]:
    """Six events: two done, one dead, one running, two pending; by name -> id."""
    got = {name: store.ingest(source, name, "{}", T0 + n).id
           for n, (source, name) in enumerate([("github", "a"), ("chat", "b"), ("github", "c"),
                                               ("chat", "d"), ("github", "e"), ("chat", "f")])}
    run(store, "w1", T0 + 10, policy=Policy(lease_ttl=TTL, max_batch=2))  # a, b done
    generation = store.acquire("w2", T0 + 11, TTL)
    assert generation is not None
    poison = Policy(lease_ttl=TTL, max_batch=1, max_attempts=1)
    [c] = store.claim("w2", generation, T0 + 11, poison) or []
    assert store.fail("w2", generation, T0 + 11, [c.id], "boom", poison)  # c dead
    [d] = store.claim("w2", generation, T0 + 12, poison) or []  # d left running
    assert (c.id, d.id) == (got["c"], got["d"])
    return got


def test_an_empty_store_lists_nothing(backend: Store) -> None:
    assert backend.events() == []
    assert backend.events(("pending", "dead"), source="x", since=0, until=T0, before=5) == []


def test_events_lists_the_newest_that_match_oldest_first(backend: Store) -> None:
    got = fill(backend)
    every = ids(backend.events())
    assert every == sorted(got.values())
    assert ids(backend.events(limit=2)) == every[-2:]
    assert [e.status for e in backend.events()] == ["done", "done", "dead", "running",
                                                    "pending", "pending"]
    assert ids(backend.events(("pending",))) == [got["e"], got["f"]]
    assert ids(backend.events(("dead", "done"))) == [got["a"], got["b"], got["c"]]
    assert ids(backend.events(("dead", "done", "done"), limit=2)) == [got["b"], got["c"]]
    assert ids(backend.events(("running", "pending"), limit=2)) == [got["e"], got["f"]]
    assert ids(backend.events(source="chat")) == [got["b"], got["d"], got["f"]]
    assert ids(backend.events(("pending",), source="chat")) == [got["f"]]
    assert backend.events(source="nobody") == []


def test_since_and_until_bound_the_arrival_time(backend: Store) -> None:
    got = fill(backend)
    assert ids(backend.events(since=T0 + 4)) == [got["e"], got["f"]]
    assert ids(backend.events(until=T0 + 2)) == [got["a"], got["b"]]
    assert ids(backend.events(since=T0 + 1, until=T0 + 3)) == [got["b"], got["c"]]
    assert backend.events(since=T0 + 3, until=T0 + 3) == []


def test_before_pages_back_through_every_event_once(backend: Store) -> None:
    fill(backend)
    for n in range(4):
        backend.ingest("bulk", str(n), "{}", T0 + 20)
    seen: list[int] = []
    before = None
    while page := backend.events(limit=3, before=before):
        assert ids(page) == sorted(ids(page)) and len(page) <= 3
        seen = ids(page) + seen
        before = page[0].id
    assert seen == ids(backend.events(limit=1000))
    assert len(seen) == 10 == len(set(seen))


def test_vitals_of_an_empty_store(backend: Store) -> None:
    vitals = backend.vitals()
    assert vitals.status == backend.status()
    assert (vitals.oldest_pending, vitals.last_run, vitals.last_prune,
            vitals.last_activity) == (None, None, None, None)
    assert isinstance(vitals.bytes, int) and vitals.bytes >= 0


def test_vitals_follow_ingests_runs_and_prunes(backend: Store) -> None:
    backend.ingest("s", "1", "{}", T0)
    backend.ingest("s", "2", "{}", T0 + 5)
    vitals = backend.vitals()
    assert vitals.oldest_pending == T0 and vitals.last_activity == T0 + 5
    assert vitals.last_run is None and vitals.status.events["pending"] == 2
    generation = backend.acquire("w", T0 + 7, TTL)
    assert generation is not None
    [first] = backend.claim("w", generation, T0 + 7, Policy(lease_ttl=TTL, max_batch=1)) or []
    vitals = backend.vitals()
    assert (first.created_at, vitals.oldest_pending, vitals.last_run) == (T0, T0 + 5, T0 + 7)
    assert vitals.last_activity == T0 + 7
    assert backend.finish("w", generation, T0 + 8, [first.id])
    assert backend.release("w", generation, T0 + 8)
    run(backend, "w", T0 + 9)
    assert backend.vitals().oldest_pending is None
    run(backend, "w", T0 + 30)  # an idle run is a run too: a stopped timer shows
    vitals = backend.vitals()
    assert (vitals.last_run, vitals.last_activity) == (T0 + 30, T0 + 30)
    backend.record_prune(T0 + 40)
    assert backend.vitals().last_prune == T0 + 40
    assert backend.vitals().status.lease == backend.lease()
