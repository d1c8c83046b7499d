"""Scenario files: the article's failure cases, and a user's own, as data, replayed.

A scenario is a TOML file of steps against a simulated clock (the format is
described in docs/scenarios.md). :func:`run` replays one through the
:class:`~agentbox.ledger.store.Store` on a fresh throwaway inbox and records what
each step observed next to what it expected. Its ``run`` and ``dispatch``
steps go through the very :class:`~agentbox.worker.Worker` and
:class:`~agentbox.dispatcher.Dispatcher` the commands use, with a scripted
handler and sender in place of the user's commands. Nothing here decides an
outcome: every rule lives behind the store, so a broken rule shows up as a
step that differs.

The parts: ``fields`` (how a step's fields are checked), ``actions`` (what each
step does), ``kinds`` (the table of step kinds), ``model`` (a scenario and a
replay's report), ``files`` (reading them), ``runner`` (replaying one). The
files themselves are the ``agentbox.scenarios`` package.
"""

from __future__ import annotations

from agentbox.replay.files import load, load_all, parse, shipped
from agentbox.replay.model import Scenario, ScenarioReport, Step, StepResult, offset, show
from agentbox.replay.runner import run, same

__all__ = ["Scenario", "ScenarioReport", "Step", "StepResult", "load", "load_all", "offset",
           "parse", "run", "same", "shipped", "show"]
