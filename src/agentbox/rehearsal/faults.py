"""Drawing the faults of one rehearsal from its seed.

Every draw comes from one :class:`random.Random` seeded with ``--seed``, in the
order the rehearsal asks (each arrival, then each run), so a seed picks the
same arrivals to deliver twice and the same runs to kill or stall every time
the rehearsal makes the same runs (each run takes three draws, whatever its
fault). Where in a run a kill lands is a fraction of the handler's typical wall
time, so the exact point depends on the machine; or, once the handler has been
seen to take journaled steps, half the kills land inside one of them instead:
the Nth try a run begins, N drawn up to the most steps a run has begun. A kill
inside a step strikes after the step's work and before its end is recorded
(see :mod:`agentbox.steprun`); a run that begins fewer steps is not killed.
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
    handler's wall time, or inside the ``step``-th step try it begins, the worker
    dying with it) or ``stall`` (the run outlives its lease and a standby takes over
    before it can finish)."""

    kind: Literal["kill", "stall"]
    after: float | None = None
    step: int | None = None


@dataclass
class Faults:
    spec: FaultSpec
    seed: int
    _rng: random.Random = field(init=False)
    _typical: float = field(default=FIRST_GUESS, init=False)
    _steps: int = field(default=0, init=False)  # the most step tries a run has begun

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
        draw, point, inside = self._rng.random(), self._rng.random(), self._rng.random()
        if draw < self.spec.kill:
            if self._steps and inside < 0.5:
                return RunFault("kill", step=1 + int(point * self._steps))
            return RunFault("kill", after=point * self._typical)
        if draw < self.spec.kill + self.spec.stall:
            return RunFault("stall")
        return None

    def ran(self, seconds: float, steps: int) -> None:
        """A handler's run that ended by itself took this long and began this many step
        tries: kills aim within it."""
        self._typical = 0.8 * self._typical + 0.2 * seconds
        self._steps = max(self._steps, steps)
