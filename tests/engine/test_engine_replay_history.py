"""Rule 4's way back (replay), rule 8 (history) and the kept counts."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.sqlite import assert_counts_true
from support.store import MakeStepWorker, actions, event_state, every_row

LATER = TTL + 1
ONE_TRY = Policy(max_attempts=1)


def bury(store: Store, worker: MakeStepWorker, *source_ids: str) -> list[int]:
    """Ingest events and fail each on its only attempt: dead, with an error."""
    ids = [store.ingest("chat", s, '{"n":1}', T0).id for s in source_ids]
    w = worker("undertaker", ONE_TRY)
    w.acquire(T0)
    w.claim(T0)
    assert w.fail(T0, "poison")
    return ids


def test_replay_brings_a_dead_event_back_as_new_on_the_same_row(
        store: Store, worker: MakeStepWorker) -> None:
    [dead] = bury(store, worker, "p")
    rows_before = store.engine.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    assert store.replay([dead], T0 + 10) == [dead]
    event = store.event(dead)
    assert event is not None
    assert (event.status, event.attempts, event.error, event.claim_gen,
            event.available_at, event.source_id) == ("pending", 0, None, None, 0, "p")
    assert store.engine.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == rows_before
    entry = store.story(dead)[-1]
    assert (entry.action, entry.at) == ("replayed", T0 + 10)
    assert store.dead() == []


def test_a_replayed_event_joins_a_batch_and_gets_its_attempts_again(
        store: Store, worker: MakeStepWorker) -> None:
    [dead] = bury(store, worker, "p")
    store.replay([dead], T0 + 1)
    store.ingest("chat", "fresh", "{}", T0 + 1)
    b = worker("B", Policy(max_attempts=2))
    b.acquire(T0 + LATER)
    b.claim(T0 + LATER)
    assert b.ids() == ["p", "fresh"]  # attempts were reset: not a retry
    b.batch = b.batch[:1]
    assert b.fail(T0 + LATER)
    b.claim(T0 + LATER)
    assert b.fail(T0 + LATER)
    assert event_state(store, "p") == ("dead", 2)


def test_replay_leaves_other_states_alone(store: Store, worker: MakeStepWorker) -> None:
    dead_ids = bury(store, worker, "d1", "d2")
    pending = store.ingest("chat", "pending", "{}", T0).id
    before = every_row(store)
    assert store.replay([pending, 424242], T0 + 1) == []
    assert every_row(store) == before
    assert store.replay(None, T0 + 2) == dead_ids
    assert store.replay(None, T0 + 3) == []
    assert store.status().events == {"pending": 3, "running": 0, "done": 0, "dead": 0}


def test_the_history_tells_an_events_whole_story(
        store: Store, worker: MakeStepWorker) -> None:
    policy = Policy(max_attempts=2)
    event_id = store.ingest("chat", "x", '{"v":1}', T0).id
    store.ingest("chat", "x", '{"v":1}', T0 + 1)  # duplicate: not a transition
    store.ingest("chat", "x", '{"v":2}', T0 + 2)  # conflict: recorded
    a, b = worker("A", policy), worker("B", policy)
    a.acquire(T0 + 3)
    a.claim(T0 + 3)                                # attempt 1, then A stalls
    b.acquire(T0 + 3 + LATER)
    b.claim(T0 + 3 + LATER)                        # abandoned -> attempt 2
    b.fail(T0 + 4 + LATER, "boom")                 # last attempt: dead at once
    store.replay([event_id], T0 + 1000)
    c = worker("C", policy)
    c.acquire(T0 + 1001)
    c.claim(T0 + 1001)
    assert c.finish(T0 + 1002, Answer(messages=(Message("done"),)))
    story = [(e.at, e.action, e.generation) for e in store.story(event_id)]
    assert story == [
        (T0, "stored", None),
        (T0 + 2, "conflict", None),
        (T0 + 3, "claimed", 1),
        (T0 + 3 + LATER, "abandoned", 1),
        (T0 + 3 + LATER, "claimed", 2),
        (T0 + 4 + LATER, "failed", 2),
        (T0 + 4 + LATER, "dead", 2),
        (T0 + 1000, "replayed", None),
        (T0 + 1001, "claimed", 3),
        (T0 + 1002, "finished", 3),
    ]
    details = [e.detail for e in store.story(event_id)]
    assert details[2] == "attempt 1" and details[4] == "attempt 2" and details[5] == "boom"


def test_a_buried_events_story_ends_with_the_reason(
        store: Store, worker: MakeStepWorker) -> None:
    event_id = store.ingest("chat", "x", "{}", T0).id
    now = T0
    for n in range(3):
        w = worker(f"W{n}")
        w.acquire(now)
        w.claim(now)
        now += LATER
    last = worker("W3")
    last.acquire(now)
    assert last.claim(now) == []
    assert actions(store, event_id) == ["stored", "claimed", "abandoned", "claimed",
                                         "abandoned", "claimed", "abandoned", "dead"]


def test_kept_counts_always_equal_a_real_count(store: Store, worker: MakeStepWorker) -> None:
    assert_counts_true(store)
    for n in range(6):
        store.ingest("chat", f"m{n}", "{}", T0)
    assert_counts_true(store)
    a = worker("A", Policy(max_attempts=1, max_batch=4))
    a.acquire(T0)
    a.claim(T0)
    assert_counts_true(store)
    a.batch = a.batch[:2]
    a.finish(T0, Answer(messages=(Message("a"), Message("b", urgent=True))))
    assert_counts_true(store)
    b = worker("B", Policy(max_attempts=1, max_batch=4))
    b.acquire(T0 + LATER)
    b.claim(T0 + LATER)  # two abandoned rows are buried; two fresh ones claimed
    assert_counts_true(store)
    b.fail(T0 + LATER)
    assert_counts_true(store)
    store.replay(None, T0 + LATER)
    assert_counts_true(store)
    assert store.status().events == {"pending": 4, "running": 0, "done": 2, "dead": 0}
    assert store.status().outbox["held"] == 2
