"""Store contract: `ready`, what a watching run does before it claims — the scheduler
pass and the gate, decided from one read — gives what `tick` and then `gate` give, and
`take`, the pass and the claim together, what `ready` and then `claim` give, on every
backend."""

from __future__ import annotations

from agentbox.ledger.store import Ready, Store, Taken
from agentbox.rules.answer import Answer, Usage
from agentbox.rules.breaker import BREAKER, BUDGET, HANDLER_FAILING, Pause
from agentbox.rules.policy import Policy
from agentbox.rules.timers import TimerSpec
from support.clock import T0, TTL
from support.store import POLICY

DAY = (T0, T0 + 86_400)
BREAKS = Policy(lease_ttl=TTL, max_attempts=1, breaker_runs=2, breaker_cooldown=600)
TOKENS = Policy(lease_ttl=TTL, budget_tokens_per_day=100)


def _run(store: Store, now: int, key: str, policy: Policy, failed: bool,
         usage: Usage | None = None) -> None:
    store.ingest("chat", key, "{}", now)
    generation = store.acquire("W", now, TTL)
    assert generation is not None
    claimed = store.claim("W", generation, now, policy)
    assert claimed is not None
    ids = [e.id for e in claimed]
    if failed:
        assert store.fail("W", generation, now, ids, "boom", policy)
    else:
        assert store.finish("W", generation, now, ids, Answer(usage=usage), policy)
    assert store.release("W", generation, now)


def test_an_empty_inbox_is_ready_with_nothing_fired_and_nothing_written(
        backend: Store) -> None:
    assert backend.ready(T0, DAY, POLICY) == Ready(0, None)
    assert backend.status().events == {"pending": 0, "running": 0, "done": 0, "dead": 0}
    assert backend.history("inbox", "pause") == []


def test_a_due_timer_fires_once_and_one_not_due_or_spent_waits(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="soon", due=T0 + 60, every=None), T0)
    backend.add_timer(TimerSpec(name="tick", due=T0, every=3600), T0)
    assert backend.ready(T0, DAY, POLICY) == Ready(1, None)
    assert [e.source_id for e in backend.timer_events("tick")] == [f"tick@{T0}"]
    assert backend.ready(T0 + 59, DAY, POLICY) == Ready(0, None)  # "tick" moved on
    assert backend.ready(T0 + 60, DAY, POLICY) == Ready(1, None)  # "soon" is due
    assert backend.ready(T0 + 61, DAY, POLICY) == Ready(0, None)  # "soon" is spent
    assert backend.timer_events("soon")[0].source_id == f"soon@{T0 + 60}"


def test_a_streak_without_a_pause_lets_a_run_claim(backend: Store) -> None:
    _run(backend, T0, "a", BREAKS, failed=True)
    assert backend.governor().streak.runs == 1
    assert backend.ready(T0 + 1, DAY, BREAKS) == Ready(0, None)


def test_an_open_breaker_holds_the_run_while_due_timers_still_fire(backend: Store) -> None:
    _run(backend, T0, "a", BREAKS, failed=True)
    _run(backend, T0 + 1, "b", BREAKS, failed=True)
    opened = Pause(BREAKER, HANDLER_FAILING, T0 + 1, T0 + 601)
    assert backend.paused() == opened
    backend.add_timer(TimerSpec(name="tick", due=T0 + 2, every=3600), T0 + 2)
    assert backend.ready(T0 + 2, DAY, BREAKS) == Ready(1, opened)
    assert backend.gate(T0 + 2, DAY, BREAKS) == opened
    assert backend.ready(T0 + 601, DAY, BREAKS) == Ready(0, None)  # the probe's turn


def test_a_budget_reached_pauses_as_the_gate_does_with_its_one_notice(backend: Store) -> None:
    _run(backend, T0, "a", TOKENS, failed=False, usage=Usage(tokens=100))
    found = backend.ready(T0 + 1, DAY, TOKENS)
    assert found.fired == 0 and found.paused is not None
    assert (found.paused.kind, found.paused.until) == (BUDGET, DAY[1])
    assert backend.gate(T0 + 2, DAY, TOKENS) == found.paused
    notices = [m for m in backend.outbox() if m.urgent]
    assert len(notices) == 1
    assert backend.ready(T0 + 3, DAY, TOKENS) == Ready(0, found.paused)
    assert len([m for m in backend.outbox() if m.urgent]) == 1


def _took(store: Store, now: int, policy: Policy) -> Taken:
    generation = store.acquire("W", now, TTL)
    assert generation is not None
    try:
        return store.take("W", generation, now, DAY, policy)
    finally:
        store.release("W", generation, now)


def test_take_claims_what_is_pending_where_nothing_is_due_or_paused(backend: Store) -> None:
    assert _took(backend, T0, POLICY) == Taken(0, None, [])
    stored = backend.ingest("chat", "a", "{}", T0).id
    fired, paused, claimed = _took(backend, T0, POLICY)
    assert (fired, paused) == (0, None)
    assert claimed is not None and [e.id for e in claimed] == [stored]
    assert claimed.keys == backend.event_keys([stored]) and claimed.state == backend.state()


def test_take_fires_a_due_timer_first_and_claims_its_event(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="tick", due=T0, every=3600), T0)
    fired, paused, claimed = _took(backend, T0, POLICY)
    assert (fired, paused) == (1, None)
    assert claimed is not None and [e.source_id for e in claimed] == [f"tick@{T0}"]
    assert backend.status().events["running"] == 1


def test_take_holds_back_while_paused_and_lets_the_probe_through(backend: Store) -> None:
    _run(backend, T0, "a", BREAKS, failed=True)
    _run(backend, T0 + 1, "b", BREAKS, failed=True)
    opened = backend.paused()
    assert opened is not None
    backend.ingest("chat", "c", "{}", T0 + 2)
    assert _took(backend, T0 + 2, BREAKS) == Taken(0, opened, None)
    assert backend.status().events["pending"] == 1  # nothing claimed, nothing written
    fired, paused, claimed = _took(backend, T0 + 601, BREAKS)  # the probe's turn
    assert (fired, paused) == (0, None)
    assert claimed is not None and [e.source_id for e in claimed] == ["c"]


def test_take_weighs_a_budget_as_the_gate_does(backend: Store) -> None:
    _run(backend, T0, "a", TOKENS, failed=False, usage=Usage(tokens=100))
    backend.ingest("chat", "b", "{}", T0 + 1)
    taken = _took(backend, T0 + 1, TOKENS)
    assert taken.claimed is None and taken.paused is not None
    assert taken.paused.kind == BUDGET
    assert backend.status().events["pending"] == 1


def test_take_by_a_worker_without_the_lease_claims_nothing(backend: Store) -> None:
    backend.ingest("chat", "a", "{}", T0)
    generation = backend.acquire("W", T0, TTL)
    assert generation is not None
    assert backend.take("X", generation, T0, DAY, POLICY) == Taken(0, None, None)
    assert backend.status().events["pending"] == 1
