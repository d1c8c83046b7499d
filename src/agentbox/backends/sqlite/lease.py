"""The lease row of one SQLite inbox; who may take it is decided in rules.lease.

Lease writes commit without waiting for the disk (``write(durable=False)``):
taking, renewing and releasing the lease are most of a run's commits, and
none of them needs to survive the machine going down on its own. Every
process that held the lease goes down with it; the first durable commit that
follows (a claim, a finish) carries the lease row to disk with it, so no
generation can be used by anything durable and then forgotten; and a lost
release or renewal only leaves the lease to expire by its old time.
"""

from __future__ import annotations

import sqlite3

from agentbox.backends.sqlite.db import write
from agentbox.rules import lease as rules
from agentbox.rules.records import Lease


def current(conn: sqlite3.Connection) -> Lease | None:
    row = conn.execute("SELECT holder, generation, until, released FROM lease").fetchone()
    return Lease(row[0], row[1], row[2], bool(row[3])) if row else None


def holds(conn: sqlite3.Connection, holder: str, generation: int, now: int) -> bool:
    """The fence. Call inside the write transaction it guards."""
    return rules.holds(current(conn), holder, generation, now)


def acquire(conn: sqlite3.Connection, holder: str, now: int, ttl: int) -> int | None:
    """Take or renew the lease; the generation, or None while another holds it."""
    with write(conn, durable=False):
        generation = rules.next_generation(current(conn), holder, now)
        if generation is None:
            return None
        conn.execute(
            """INSERT INTO lease (one, holder, generation, until, released)
               VALUES (1, ?, ?, ?, 0)
               ON CONFLICT (one) DO UPDATE SET holder = excluded.holder,
                   generation = excluded.generation, until = excluded.until, released = 0""",
            (holder, generation, now + ttl))
        return generation


def renew(conn: sqlite3.Connection, holder: str, generation: int, now: int, ttl: int) -> bool:
    """Extend a lease this worker still holds; False once it has lapsed or moved on."""
    with write(conn, durable=False):
        if not holds(conn, holder, generation, now):
            return False
        conn.execute("UPDATE lease SET until = ? WHERE one = 1", (now + ttl,))
        return True


def release(conn: sqlite3.Connection, holder: str, generation: int, now: int) -> bool:
    """End this worker's lease now, so the next tick need not wait out the TTL."""
    with write(conn, durable=False):
        held = current(conn)
        if held is None or not rules.holds(held, holder, generation, now):
            return False
        left = rules.release(held, now)
        conn.execute("UPDATE lease SET until = ?, released = ? WHERE one = 1",
                     (left.until, int(left.released)))
        return True
