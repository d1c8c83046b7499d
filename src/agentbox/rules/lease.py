"""One worker per inbox: who may hold the lease, and with which generation.

Renewing keeps the generation; any takeover of an expired lease, even by the
same holder, bumps it. Everything a worker writes is checked against
(holder, generation, expiry) in the same transaction as the write, so a
worker that was only slow when its replacement started records nothing.
"""

from __future__ import annotations

import os

from agentbox.rules.records import Lease


def new_holder_id() -> str:
    """A holder name unique to this process and never reused: host:pid:random."""
    import secrets  # here, not at the top: `agentbox ingest` never needs them
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def holds(lease: Lease | None, holder: str, generation: int, now: int) -> bool:
    """The fence: ``holder`` still owns the lease of ``generation`` at ``now``.

    A released lease is held by nobody, whatever the clock says.
    """
    return (lease is not None and not lease.released and lease.holder == holder
            and lease.generation == generation and lease.until >= now)


def taken(lease: Lease | None, now: int) -> bool:
    """Someone holds the lease at ``now``: it is neither released nor expired."""
    return lease is not None and not lease.released and lease.until >= now


def next_generation(lease: Lease | None, holder: str, now: int) -> int | None:
    """The generation ``holder`` gets by acquiring now, or None while another holds it.

    A released lease is free at any clock: were its end only a time, a clock
    stepped back (NTP, a pinned ``AGENTBOX_NOW``) would keep every run out
    until it caught up again.
    """
    if lease is None:
        return 1
    if lease.released or lease.until < now:
        return lease.generation + 1
    if lease.holder == holder:
        return lease.generation
    return None


def held_until(now: int, ttl: int) -> int:
    """When a lease taken or renewed at ``now`` ends: a time like any other, within the
    years 1970 to 9999 (a clock pinned at the end of 9999 takes no lease)."""
    from agentbox.clock import check_time

    return check_time(now + ttl, "the lease would be held until")


def release(lease: Lease, now: int) -> Lease:
    """The row a release leaves: marked released rather than deleted, so the
    generation keeps counting up (the next taker bumps it), with ``until`` set
    to when it was released."""
    return lease._replace(until=now, released=True)
