"""The lease: one worker per inbox, with a generation that fences out the others.

Who may take the lease is decided in :mod:`agentbox.rules.lease`; the lease is
columns of the inbox's own row, read by the statement that takes the inbox's
lock. Lease writes commit without waiting for the disk (``durable=False``):
taking, renewing and releasing the lease are most of a run's commits, and
none needs to survive the machine going down on its own. Every process that
held the lease goes down with it; the first durable commit that follows (a
claim, a finish) carries the lease row to disk with it, so no generation can
be used by anything durable and then forgotten; and a lost release or renewal
only leaves the lease to expire by its old time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbox.ledger.core import LEASE_COLUMNS, Core
from agentbox.rules import lease as rules
from agentbox.rules.records import Lease

if TYPE_CHECKING:
    from agentbox.ledger.engine import Tx


def _set(tx: Tx, lease: Lease) -> None:
    tx.run(f"""UPDATE inboxes SET ({LEASE_COLUMNS}) = (:holder, :generation, :until, :released)
               WHERE id = :box""", holder=lease.holder, generation=lease.generation,
           until=lease.until, released=lease.released)


class Leases(Core):
    """Taking, keeping and giving back the inbox's lease."""

    def acquire(self, holder: str, now: int, ttl: int) -> int | None:
        """Take or renew the lease until ``now + ttl``: the generation, or None when
        another holder's lease is still live. A takeover bumps the generation."""
        with self._locked(durable=False) as (tx, lease):
            generation = rules.next_generation(lease, holder, now)
            if generation is not None:
                _set(tx, Lease(holder, generation, rules.held_until(now, ttl)))
            return generation

    def renew(self, holder: str, generation: int, now: int, ttl: int) -> bool:
        """Extend a lease this holder still holds; False once it lapsed or moved on."""
        with self._locked(durable=False) as (tx, lease):
            if not rules.holds(lease, holder, generation, now):
                return False
            _set(tx, Lease(holder, generation, rules.held_until(now, ttl)))
            return True

    def release(self, holder: str, generation: int, now: int) -> bool:
        """End the lease now (fenced), so the next worker need not wait out the TTL."""
        with self._locked(durable=False) as (tx, lease):
            if lease is None or not rules.holds(lease, holder, generation, now):
                return False
            _set(tx, rules.release(lease, now))
            return True
