"""The article's failure cases 1-5, driven through the engine, with its figures.

Simulated clock, one process; a crash is a worker that claims and never finishes.
"""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from support.clock import T0, TTL
from support.store import MakeStepWorker, event_state


def rows(store: Store, table: str) -> int:
    return int(store.engine.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_case_1_a_webhook_delivered_twice_is_stored_once(store: Store) -> None:
    first = store.ingest("github", "delivery-7f3a", '{"pr":12}', T0)
    retry = store.ingest("github", "delivery-7f3a", '{"pr":12}', T0)
    # first: True  retry: False  rows: 1
    assert (first.outcome == "stored", retry.outcome == "stored", rows(store, "events")) == (
        True, False, 1)


def test_case_2_two_workers_ask_for_the_lease_at_the_same_time(store: Store) -> None:
    # A: 1  B: None
    assert (store.acquire("A", T0, TTL), store.acquire("B", T0, TTL)) == (1, None)


def test_case_3_three_quick_messages_become_one_run(
        store: Store, worker: MakeStepWorker) -> None:
    for n in range(3):
        store.ingest("chat", f"msg-{n}", f'{{"text":"message {n}"}}', T0 + 5)
    # events in one run: 3
    assert len(worker("A").run(T0 + 5)) == 3


def test_case_4_a_stalled_worker_cannot_finish_after_a_takeover(
        store: Store, worker: MakeStepWorker) -> None:
    a, b = worker("A"), worker("B")
    store.ingest("chat", "msg-3", '{"text":"send the report"}', T0 + 10)
    gen_a = a.acquire(T0 + 10)
    a.claim(T0 + 10)  # A stalls here
    # B before A's lease expires: None
    assert b.acquire(T0 + 60) is None
    t2 = T0 + 10 + TTL + 1
    # B after expiry: gen 2  re-claims ['msg-3']
    assert b.acquire(t2) == 2
    b.claim(t2)
    assert b.ids() == ["msg-3"]
    assert b.finish(t2, Answer(messages=(Message("report sent"),)))
    t3 = t2 + TTL + 1  # B's lease lapses too
    # A renews after both leases lapsed: gen 3
    assert a.acquire(t3) == 3
    # A finishes its old claim (gen 1): False
    assert gen_a == 1
    assert not store.finish("A", gen_a, t3, [e.id for e in a.batch],
                            Answer(messages=(Message("report sent"),)))
    # msg-3: ('done', 2)  outbox rows: 1
    assert event_state(store, "msg-3") == ("done", 2)
    assert rows(store, "outbox") == 1


def test_case_5_a_poison_event_dies_and_the_healthy_one_survives(
        store: Store, worker: MakeStepWorker) -> None:
    store.ingest("chat", "poison", '{"text":"x"}', T0)
    store.ingest("chat", "healthy", '{"text":"ok"}', T0)
    now = T0
    log = []
    for n in range(5):
        w = worker(f"W{n}")
        assert w.acquire(now) is not None
        assert w.claim(now) is not None
        if "poison" in w.ids():
            log.append((w.holder, w.ids(), "crashed"))  # no finish
        else:
            assert w.finish(now)
            log.append((w.holder, w.ids(), "finished"))
        now += TTL + 1
    assert log == [
        ("W0", ["poison", "healthy"], "crashed"),
        ("W1", ["poison"], "crashed"),
        ("W2", ["poison"], "crashed"),
        ("W3", ["healthy"], "finished"),
        ("W4", [], "finished"),
    ]
    # poison: ('dead', 3)  healthy: ('done', 2)
    assert event_state(store, "poison") == ("dead", 3)
    assert event_state(store, "healthy") == ("done", 2)
