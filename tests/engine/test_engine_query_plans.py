"""The hot reads find their rows by an index: due timers, never every timer; the day's
usage, from the index alone.

An inbox may hold a hundred thousand idle timers; a pass that scanned them all
would cost what they number (the partial index `timers_due` serves the pass only
when a query's condition is written as the index's own). Every statement a pass,
the work lookup and the timer list run is traced and planned by SQLite itself.
"""

from __future__ import annotations

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.timers import TimerSpec
from support.clock import T0

pytestmark = pytest.mark.sqlite_file  # SQLite's own query planner


def test_a_scheduler_pass_reads_due_timers_by_their_index(store: Store) -> None:
    for n in range(50):
        store.add_timer(TimerSpec(name=f"t{n}", due=T0 + n, every=60), T0)
    conn = store.engine.conn  # type: ignore[attr-defined]
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    try:
        assert store.tick(T0 + 10) == 11
        assert store.next_work(T0 + 10) is not None
        store.tick(T0 + 10)  # nothing due: a read only
    finally:
        conn.set_trace_callback(None)
    on_timers = [sql for sql in traced
                 if sql.lstrip().upper().startswith("SELECT") and "timers" in sql]
    assert on_timers, traced
    for sql in on_timers:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert not any(step.startswith("SCAN timers") or step.startswith("SCAN t")
                       for step in plan), (sql, plan)


def test_the_budget_check_sums_the_days_usage_from_its_index_alone(store: Store) -> None:
    from agentbox.rules.answer import Answer, Usage
    from agentbox.rules.policy import Policy
    from support.store import run

    for n in range(3):
        store.ingest("chat", f"m{n}", "{}", T0)
        run(store, f"w{n}", T0, Answer(usage=Usage(tokens=10, cost=0.5)))
    policy = Policy(budget_tokens_per_day=1000)
    conn = store.engine.conn  # type: ignore[attr-defined]
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    try:
        assert store.gate(T0, (T0 - 10, T0 + 10), policy) is None
    finally:
        conn.set_trace_callback(None)
    [summed] = [sql for sql in traced if "SUM(" in sql]
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {summed}")]
    assert any("usage_slots USING PRIMARY KEY" in step for step in plan), plan
    assert any("USING COVERING INDEX run_usage_by_time" in step for step in plan), plan
    assert not any(step.startswith(("SCAN usage_slots", "SCAN run_usage")) for step in plan)


def test_the_budget_check_costs_the_same_on_a_day_of_a_thousand_runs(store: Store) -> None:
    """The check adds up the day's quarter-hour totals, not its runs: counted in SQLite's
    virtual-machine steps, a day of 1,096 runs costs what a day of 96 does, one in each
    of its quarter hours."""
    from agentbox.ledger.pause import USAGE_SLOT_S, usage_in
    from agentbox.rules.answer import Usage
    from agentbox.rules.policy import Policy

    start = T0 - T0 % USAGE_SLOT_S
    day = (start, start + 86_400)
    policy = Policy(budget_tokens_per_day=10**9)
    conn = store.engine.conn  # type: ignore[attr-defined]

    def steps() -> int:
        counted = [0]

        def count() -> int:
            counted[0] += 1
            return 0
        conn.set_progress_handler(count, 1)
        try:
            assert store.gate(start + 10, day, policy) is None
        finally:
            conn.set_progress_handler(None, 1)
        return counted[0]

    def record(runs: int) -> None:
        with store._write() as tx:
            for n in range(runs):
                usage_in(tx, start + n % 96 * USAGE_SLOT_S + n % USAGE_SLOT_S, 1, [1],
                         Usage(tokens=1))

    record(96)
    few = steps()
    record(1000)
    assert steps() <= few + 50, few


def test_a_claim_finds_the_events_that_failed_a_try_by_their_index(store: Store) -> None:
    """Retries and events out of tries are looked for before fresh ones: by the partial
    index `events_retrying`, not by walking every pending event of the backlog."""
    from agentbox.rules.policy import Policy

    for n in range(20):
        store.ingest("chat", f"m{n}", "{}", T0)
    generation = store.acquire("w", T0, 60)
    assert generation is not None
    conn = store.engine.conn  # type: ignore[attr-defined]
    traced: list[str] = []
    conn.set_trace_callback(traced.append)
    try:
        assert store.claim("w", generation, T0, Policy(max_batch=1)) is not None
    finally:
        conn.set_trace_callback(None)
    [candidates] = [sql for sql in traced if "'exhausted'" in sql]
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {candidates}")]
    assert sum("USING INDEX events_retrying" in step for step in plan) == 2, plan
