"""Drawing the faults of one rehearsal from its seed.

Every draw comes from one :class:`random.Random` seeded with ``--seed``, in the
order the rehearsal asks (each arrival, then each run), so a seed picks the
same arrivals to deliver twice and the same runs to kill or stall every time
the rehearsal makes the same runs. Where in a run a kill lands is a fraction of
the handler's typical wall time, so the exact point depends on the machine.

A run's fault is a :class:`RunFault`; killing a run inside a named step is a
further kind of it, drawn here like the others, once the handler can name its
steps to the rehearsal.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from agentbox.rules.faults import FaultSpec

FIRST_GUESS = 0.05  # seconds a handler takes, before any run has been timed
REDELIVERY_WITHIN = 3600  # a duplicate delivery comes up to an hour after the first


@dataclass(frozen=True)
class RunFault:
    """What happens to one run: ``kill`` (SIGKILL after ``after`` seconds of the
    handler's wall time, the worker dying with it) or ``stall`` (the run outlives its
    lease and a standby takes over before it can finish)."""

    kind: Literal["kill", "stall"]
    after: float = 0.0


@dataclass
class Faults:
    spec: FaultSpec
    seed: int
    _rng: random.Random = field(init=False)
    _typical: float = field(default=FIRST_GUESS, init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def redelivery(self) -> int | None:
        """Seconds after an arrival its duplicate comes, or None (delivered once)."""
        if self.spec.duplicate <= 0 or self._rng.random() >= self.spec.duplicate:
            return None
        return self._rng.randint(0, REDELIVERY_WITHIN)

    def for_run(self) -> RunFault | None:
        """The fault of the next run, if any."""
        if not (self.spec.kill or self.spec.stall):
            return None
        draw, point = self._rng.random(), self._rng.random()
        if draw < self.spec.kill:
            return RunFault("kill", point * self._typical)
        if draw < self.spec.kill + self.spec.stall:
            return RunFault("stall")
        return None

    def timed(self, seconds: float) -> None:
        """A handler's run that ended by itself took this long: kills aim within it."""
        self._typical = 0.8 * self._typical + 0.2 * seconds
