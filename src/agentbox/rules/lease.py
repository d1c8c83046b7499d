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
    """The fence: ``holder`` still owns the lease of ``generation`` at ``now``."""
    return (lease is not None and lease.holder == holder
            and lease.generation == generation and lease.until >= now)


def next_generation(lease: Lease | None, holder: str, now: int) -> int | None:
    """The generation ``holder`` gets by acquiring now, or None while another holds it."""
    if lease is None:
        return 1
    if lease.holder == holder and lease.until >= now:
        return lease.generation
    if lease.until < now:
        return lease.generation + 1
    return None


def released_until(now: int) -> int:
    """A released lease is marked expired rather than deleted: the generation
    must keep counting up, and the next taker bumps it as for any expired lease."""
    return now - 1
