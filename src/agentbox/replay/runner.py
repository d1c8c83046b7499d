"""Replaying a scenario: each step acted out on a throwaway inbox, what it observed
set beside what the file expected."""

from __future__ import annotations

from typing import Any

from agentbox.errors import AgentboxError, BadInput
from agentbox.location import scratch_store
from agentbox.replay.actions import Replay
from agentbox.replay.fields import StepError, is_number
from agentbox.replay.kinds import KINDS
from agentbox.replay.model import Scenario, ScenarioReport, Step, StepResult, offset


def _plain(value: Any) -> Any:
    """What a step observed, in the terms a file writes: TOML has no null."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def same(expected: Any, observed: Any) -> bool:
    """Equality that keeps true apart from 1; `expect = "error"` matches any error."""
    if expected == "error" and isinstance(observed, str):
        return observed.startswith("error: ")
    if isinstance(expected, bool) or isinstance(observed, bool):
        return type(expected) is type(observed) and expected == observed
    if is_number(expected) and is_number(observed):
        return bool(expected == observed)
    if isinstance(expected, list) and isinstance(observed, list):
        return len(expected) == len(observed) and all(
            same(e, o) for e, o in zip(expected, observed, strict=True))
    if isinstance(expected, dict) and isinstance(observed, dict):
        return expected.keys() == observed.keys() and all(
            same(v, observed[k]) for k, v in expected.items())
    return type(expected) is type(observed) and bool(expected == observed)


def _play(replay: Replay, step: Step, origin: str) -> StepResult:
    if step.at is not None:
        replay.now = step.at
    kind = KINDS[step.kind]
    try:
        observed = kind.act(replay, step.args)
    except AgentboxError as exc:
        observed = f"error: {exc}"
    except StepError as exc:
        raise BadInput(f"{origin}: step {step.n} ({step.kind}): {exc}") from None
    if not step.checks:
        return StepResult(step, replay.now, f"clock {offset(replay.now, replay.start)}", None)
    observed = _plain(observed)
    if kind.shape is not None:
        observed = kind.shape(observed, step.expect)
    return StepResult(step, replay.now, observed, same(step.expect, observed))


def run(scenario: Scenario, database: str | None = None) -> ScenarioReport:
    """Replay a scenario on a fresh throwaway inbox; the report says what differed.

    The inbox is a temporary SQLite file, or with a PostgreSQL URL in
    ``database`` a temporary schema in that database, dropped afterwards.
    """
    with scratch_store(database, "scenario") as store:
        replay = Replay(store, scenario.policy, scenario.start, scenario.start)
        results = tuple(_play(replay, step, scenario.origin) for step in scenario.steps)
    return ScenarioReport(scenario, results)
