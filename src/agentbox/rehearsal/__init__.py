"""Rehearsal: an inbox's recorded traffic exported, and replayed against a handler.

``traffic`` is the export format and reading it; ``faults`` draws a
rehearsal's faults from its seed; ``play`` replays traffic into a scratch inbox
on a simulated clock through the Worker and Dispatcher the commands use;
``report`` sets what was sent beside what would have been and checks the
promises. :func:`rehearse` is the whole of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from agentbox.rehearsal.report import Report
from agentbox.rehearsal.traffic import Recording
from agentbox.rules.faults import FaultSpec
from agentbox.rules.policy import Policy

if TYPE_CHECKING:
    from agentbox.dispatcher import Planned


def rehearse(traffic: Recording, policy: Policy, argv: Sequence[str], user: str,
             faults: FaultSpec | None = None, seed: int = 0,
             env: Mapping[str, str] | None = None,
             channels: Sequence[Planned] = ()) -> Report:
    """Replay ``traffic`` against the handler ``argv`` on a temporary SQLite inbox,
    removed afterwards with the folder of the runs' step log; nothing else is
    written. ``channels`` are the outbox channels dispatched, each under its own
    policy and quiet hours (none: ``default`` under ``policy``)."""
    import tempfile
    from pathlib import Path

    from agentbox.location import scratch_store
    from agentbox.rehearsal import report
    from agentbox.rehearsal.faults import Faults
    from agentbox.rehearsal.play import Rehearsal

    drawn = Faults(faults, seed) if faults is not None and faults.any else None
    with (scratch_store(None, user) as store,
          tempfile.TemporaryDirectory(prefix="agentbox-rehearsal-") as folder):
        played = Rehearsal(store, policy, traffic, argv, user, Path(folder), drawn, env,
                           channels).play()
        return report.report(traffic, played, store, policy,
                             None if drawn is None else drawn.spec.describe(),
                             None if drawn is None else seed)


__all__ = ["Recording", "Report", "rehearse"]
