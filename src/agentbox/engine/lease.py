"""One worker per inbox: a single-row lease with a generation fence.

Renewing keeps the generation; any takeover of an expired lease, even by the
same holder, bumps it. Everything a worker writes is checked against
(holder, generation, expiry) in the same transaction, so a worker that was
only slow when its replacement started cannot record anything.
"""

from __future__ import annotations

import os
import sqlite3
from typing import NamedTuple

from agentbox.engine.db import write


class Lease(NamedTuple):
    holder: str
    generation: int
    until: int


def new_holder_id() -> str:
    """A holder name unique to this process and never reused: host:pid:random."""
    import secrets  # here, not at the top: `agentbox ingest` never needs them
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def current(conn: sqlite3.Connection) -> Lease | None:
    row = conn.execute("SELECT holder, generation, until FROM lease").fetchone()
    return Lease(*row) if row else None


def holds(conn: sqlite3.Connection, holder: str, generation: int, now: int) -> bool:
    """The fence. Call inside the write transaction it guards."""
    lease = current(conn)
    return (lease is not None and lease.holder == holder
            and lease.generation == generation and lease.until >= now)


def acquire(conn: sqlite3.Connection, holder: str, now: int, ttl: int) -> int | None:
    """Take or renew the lease; the generation, or None while another holds it."""
    with write(conn):
        lease = current(conn)
        if lease is None:
            generation = 1
        elif lease.holder == holder and lease.until >= now:
            generation = lease.generation
        elif lease.until < now:
            generation = lease.generation + 1
        else:
            return None
        conn.execute(
            """INSERT INTO lease (one, holder, generation, until) VALUES (1, ?, ?, ?)
               ON CONFLICT (one) DO UPDATE SET holder = excluded.holder,
                   generation = excluded.generation, until = excluded.until""",
            (holder, generation, now + ttl))
        return generation


def renew(conn: sqlite3.Connection, holder: str, generation: int, now: int, ttl: int) -> bool:
    """Extend a lease this worker still holds; False once it has lapsed or moved on."""
    with write(conn):
        if not holds(conn, holder, generation, now):
            return False
        conn.execute("UPDATE lease SET until = ? WHERE one = 1", (now + ttl,))
        return True


def release(conn: sqlite3.Connection, holder: str, generation: int, now: int) -> bool:
    """End this worker's lease now, so the next tick need not wait out the TTL.

    The lease is marked expired rather than deleted: the generation must keep
    counting up, and the next taker bumps it as for any expired lease.
    """
    with write(conn):
        if not holds(conn, holder, generation, now):
            return False
        conn.execute("UPDATE lease SET until = ? WHERE one = 1", (now - 1,))
        return True
