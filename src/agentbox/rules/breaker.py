"""When an inbox stops itself: a handler failing run after run, or a day's budget spent.

A broken deploy of the agent fails every batch. Without a breaker each event
would spend its attempts in turn and the whole inbox would go dead within
seconds; with it, ``breaker_runs`` failed runs in a row that cover at least
two distinct events (one poison event alone is the attempts' business, not
the breaker's) pause the inbox. After ``breaker_cooldown`` one probe run is
let through: its success closes the breaker, its failure opens it again.

A handler that exits 75 (EX_TEMPFAIL) says the failure is not the events'
fault: their attempts are given back and they wait at least
:data:`MIN_TEMPFAIL_WAIT`; the run still counts towards the breaker.

Budgets cap what one local day's runs may spend; reaching one pauses the
inbox until the day ends. Everything here is pure: the ledger reads the
state, asks these functions, and writes what they decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from agentbox.clock import check_time
from agentbox.rules.policy import Policy

MIN_TEMPFAIL_WAIT = 60  # seconds: a temporary failure is never retried sooner
HANDLER_FAILING = "handler failing"
BREAKER, BUDGET = "breaker", "budget"  # the two kinds of pause


class Streak(NamedTuple):
    """The failed runs in a row, and whether they covered more than one event."""

    runs: int = 0
    first_event: int | None = None  # the lowest event of the streak's first run
    distinct: bool = False          # some run of the streak had another event


class Pause(NamedTuple):
    kind: str         # BREAKER or BUDGET
    reason: str       # what status, doctor and metrics say
    since: int
    until: int | None  # a breaker's probe time; the end of a budget's local day


def after_failed_run(streak: Streak, ids: Sequence[int]) -> Streak:
    """The streak once a run over ``ids`` failed."""
    events = set(ids)
    if not events:
        return streak
    first = streak.first_event if streak.first_event is not None else min(events)
    distinct = streak.distinct or bool(events - {first})
    return Streak(streak.runs + 1, first, distinct)


def trips(streak: Streak, policy: Policy) -> bool:
    """Whether the streak opens the breaker."""
    return streak.runs >= policy.breaker_runs and streak.distinct


def opened(now: int, policy: Policy) -> Pause:
    """The pause a tripped (or failed probe's) breaker sets: probe after the cooldown."""
    return Pause(BREAKER, HANDLER_FAILING, now,
                 check_time(now + policy.breaker_cooldown, "the breaker's probe would be at"))


def in_force(pause: Pause | None, now: int) -> Pause | None:
    """The pause that keeps a run from claiming now: None when there is none, when a
    breaker's cooldown is over (a probe may run), or when a budget's day has ended."""
    if pause is None:
        return None
    if pause.until is not None and now >= pause.until:
        return None
    return pause


def tempfail_wait(policy: Policy) -> int:
    """Seconds events wait after their handler exited 75."""
    return max(policy.retry_backoff, MIN_TEMPFAIL_WAIT)


def tempfail_at(now: int, policy: Policy) -> int:
    return check_time(now + tempfail_wait(policy), "a retry would be at")


def over_budget(tokens: float, cost: float, policy: Policy) -> str | None:
    """The reason a day's usage pauses the inbox (``token budget``, ``cost budget``: a
    few fixed words, a metric's label), or None while it is within budget."""
    if policy.budget_tokens_per_day is not None and tokens >= policy.budget_tokens_per_day:
        return "token budget"
    if policy.budget_cost_per_day is not None and cost >= policy.budget_cost_per_day:
        return "cost budget"
    return None


def spent(tokens: float, cost: float, policy: Policy) -> str:
    """A day's usage against its budgets, for the notice: "1200 of 1000 tokens"."""
    said = []
    if policy.budget_tokens_per_day is not None:
        said.append(f"{_number(tokens)} of {policy.budget_tokens_per_day} tokens")
    if policy.budget_cost_per_day is not None:
        said.append(f"cost {_number(cost)} of {_number(policy.budget_cost_per_day)}")
    return ", ".join(said)


def budgeted(policy: Policy) -> bool:
    return policy.budget_tokens_per_day is not None or policy.budget_cost_per_day is not None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
