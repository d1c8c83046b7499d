"""A scenario as read from its file, and the report of one replay of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentbox.durations import format_duration
from agentbox.replay.kinds import KINDS
from agentbox.rules.policy import Policy


@dataclass(frozen=True)
class Step:
    n: int
    kind: str
    args: Mapping[str, Any]
    expect: Any  # None for a clock step
    at: int | None
    label: str

    @property
    def checks(self) -> bool:
        return KINDS[self.kind].expect is not None


@dataclass(frozen=True)
class Scenario:
    name: str
    origin: str  # the file, as error messages name it
    title: str
    story: str  # what goes wrong without the rule, shown above the table
    description: str
    start: int
    settings: Mapping[str, Any]
    policy: Policy
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class StepResult:
    step: Step
    at: int
    observed: Any
    ok: bool | None  # None for a clock step


@dataclass(frozen=True)
class ScenarioReport:
    scenario: Scenario
    results: tuple[StepResult, ...]

    @property
    def passed(self) -> int:
        return sum(r.ok is True for r in self.results)

    @property
    def failed(self) -> int:
        return sum(r.ok is False for r in self.results)

    @property
    def checked(self) -> int:
        return sum(r.ok is not None for r in self.results)

    def document(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "name": s.name, "title": s.title, "story": s.story,
            "description": s.description,
            "file": s.origin, "start": s.start, "settings": dict(s.settings),
            "steps": [{"n": r.step.n, "do": r.step.kind, "label": r.step.label,
                       "at": r.at, "clock": offset(r.at, s.start),
                       "expected": r.step.expect, "observed": r.observed, "ok": r.ok}
                      for r in self.results],
            "checked": self.checked, "passed": self.passed, "failed": self.failed,
        }


def offset(at: int, start: int) -> str:
    """A moment as '+DURATION' from the scenario's start."""
    delta = at - start
    return ("+" if delta >= 0 else "-") + format_duration(abs(delta))


def show(value: Any) -> str:
    """A value as the tables show it: strings bare, the rest as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

