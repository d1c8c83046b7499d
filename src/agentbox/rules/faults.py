"""The faults a rehearsal may inject, as a spec such as ``kill=0.2,duplicate=0.1``.

Each fault is a name and a probability from 0 to 1: ``kill`` SIGKILLs a run
(its handler at a random point, the worker with it), ``duplicate`` delivers an
arrival a second time, ``stall`` holds a run past ``lease_ttl`` so a standby
takes over. Which runs and arrivals are hit is drawn from a seeded generator
(:mod:`agentbox.rehearsal.faults`); this module only reads and checks the spec.
"""

from __future__ import annotations

from typing import NamedTuple

from agentbox.errors import UsageError

FAULTS = ("kill", "duplicate", "stall")


class FaultSpec(NamedTuple):
    """The probability of each fault; all zero is a rehearsal without faults."""

    kill: float = 0.0
    duplicate: float = 0.0
    stall: float = 0.0

    @property
    def any(self) -> bool:
        return any(p > 0 for p in self)

    def describe(self) -> str:
        return ",".join(f"{name}={p:g}" for name, p in zip(FAULTS, self, strict=True) if p > 0)


def parse(spec: str) -> FaultSpec:
    """``NAME=P[,NAME=P…]`` with each NAME one of :data:`FAULTS`, once, and P in 0..1."""
    given: dict[str, float] = {}
    for part in (p.strip() for p in spec.split(",")):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in FAULTS:
            raise UsageError(f"--faults: {part!r} is not NAME=P with NAME one of "
                             f"{', '.join(FAULTS)} (e.g. kill=0.2,duplicate=0.1)")
        if name in given:
            raise UsageError(f"--faults: {name} is given twice")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not 0.0 <= p <= 1.0:  # also refuses nan
            raise UsageError(f"--faults: {name} takes a probability from 0 to 1, "
                             f"not {value.strip()!r}")
        given[name] = p
    return FaultSpec(**given)
