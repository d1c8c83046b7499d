"""The breaker's rules: a streak of failed runs, when it trips, what a pause holds back,
and what a day's usage against the budgets means."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbox.errors import BadInput
from agentbox.rules import breaker
from agentbox.rules.answer import Usage, parse
from agentbox.rules.breaker import Pause, Streak
from agentbox.rules.policy import Policy


def streak_of(*runs: list[int]) -> Streak:
    streak = Streak()
    for ids in runs:
        streak = breaker.after_failed_run(streak, ids)
    return streak


def test_one_poison_event_never_trips_the_breaker() -> None:
    policy = Policy(breaker_runs=3)
    assert not breaker.trips(streak_of(*[[7]] * 10), policy)


def test_failed_runs_over_two_events_trip_at_breaker_runs() -> None:
    policy = Policy(breaker_runs=3)
    assert not breaker.trips(streak_of([1, 2], [1]), policy)
    assert breaker.trips(streak_of([1, 2], [1], [1]), policy)
    assert breaker.trips(streak_of([1], [1], [2]), policy)


@given(st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=4), max_size=12),
       st.integers(1, 6))
def test_a_streak_trips_exactly_when_enough_runs_covered_two_events(
        runs: list[list[int]], limit: int) -> None:
    seen = {i for ids in runs for i in ids}
    assert breaker.trips(streak_of(*runs), Policy(breaker_runs=limit)) == (
        len(runs) >= limit and len(seen) >= 2)


def test_a_pause_holds_runs_until_its_time() -> None:
    pause = Pause(breaker.BREAKER, breaker.HANDLER_FAILING, 100, 700)
    assert breaker.in_force(pause, 699) == pause
    assert breaker.in_force(pause, 700) is None  # the probe may run
    assert breaker.in_force(None, 0) is None
    assert breaker.opened(100, Policy()) == Pause("breaker", "handler failing", 100, 700)


def test_exit_75_waits_at_least_a_minute_and_the_backoff_when_longer() -> None:
    assert breaker.tempfail_wait(Policy()) == 60
    assert breaker.tempfail_wait(Policy(retry_backoff=300)) == 300
    with pytest.raises(BadInput):
        breaker.tempfail_at(253_402_300_799, Policy())


def test_budgets_are_reached_at_the_limit_not_before() -> None:
    policy = Policy(budget_tokens_per_day=1000, budget_cost_per_day=2.5)
    assert breaker.over_budget(999, 2.49, policy) is None
    assert breaker.over_budget(1000, 0, policy) == "token budget"
    assert breaker.over_budget(0, 2.5, policy) == "cost budget"
    assert breaker.spent(1000, 0.25, policy) == "1000 of 1000 tokens, cost 0.25 of 2.5"
    assert breaker.over_budget(10**9, 10**9, Policy()) is None
    assert not breaker.budgeted(Policy())


def test_usage_in_an_answer_is_optional_and_checked() -> None:
    assert parse('{"usage": {"tokens": 12, "cost": 0.5}}').usage == Usage(12, 0.5)
    assert parse('{"usage": {}}').usage == Usage()
    assert parse('{"messages": []}').usage is None
    for bad in ('{"usage": 3}', '{"usage": {"tokens": -1}}', '{"usage": {"tokens": 1.5}}',
                '{"usage": {"cost": true}}', '{"usage": {"tokens": 1, "x": 2}}',
                '{"usage": {"cost": "1"}}'):
        with pytest.raises(BadInput):
            parse(bad)
