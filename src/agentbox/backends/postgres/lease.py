"""The inbox lock and the lease it guards; who may take the lease is decided in rules.lease.

Every write to an inbox except an ingest starts by locking that inbox's row
(``FOR NO KEY UPDATE``): writers of one inbox queue, writers of two inboxes
never meet, and any number of hosts may share the database. The lease is
columns of the same row, so the statement that takes the lock also reads
the fence, as it stands once the lock is ours.

Lease writes commit without waiting for the disk (``synchronous_commit =
off`` for their transaction alone): taking, renewing and releasing the lease
are most of a run's commits, and none needs to survive a crash of the
server on its own. The write-ahead log is written in order, so the first
durable commit that follows (a claim, a finish) carries the lease row to disk
with it: no generation can be used by anything durable and then forgotten,
and a lost release or renewal only leaves the lease to expire by its old time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres.db import Box, Tx, transaction
from agentbox.rules import lease as rules
from agentbox.rules.records import Lease

COLUMNS = "lease_holder, lease_generation, lease_until, lease_released"


def from_row(row: Sequence[Any] | None) -> Lease | None:
    """The lease of a row that selected :data:`COLUMNS`."""
    if row is None or row[0] is None:
        return None
    return Lease(str(row[0]), int(row[1]), int(row[2]), bool(row[3]))


def current(box: Box) -> Lease | None:
    return from_row(box.read(f"SELECT {COLUMNS} FROM inboxes WHERE id = %s",
                           (box.id,)).fetchone())


@contextmanager
def locked(conn: Connection[Any], box_id: int,
           durable: bool = True) -> Iterator[tuple[Tx, Lease | None]]:
    """A transaction holding the inbox lock: (the transaction, the lease under the lock).

    The lock is the transaction's first statement, sent with its BEGIN. With
    ``durable`` false the COMMIT does not wait for the disk (see the module).
    """
    with transaction(conn, box_id) as tx:
        if not durable:
            tx.write("SET LOCAL synchronous_commit = off")
        yield tx, from_row(tx.read(
            f"SELECT {COLUMNS} FROM inboxes WHERE id = %s FOR NO KEY UPDATE",
            (box_id,)).fetchone())


def _set(tx: Tx, lease: Lease) -> None:
    tx.write(f"UPDATE inboxes SET ({COLUMNS}) = (%s, %s, %s, %s) WHERE id = %s",
             (*lease, tx.id))


def acquire(conn: Connection[Any], box_id: int, holder: str, now: int,
            ttl: int) -> int | None:
    """Take or renew the lease; the generation, or None while another holds it."""
    with locked(conn, box_id, durable=False) as (tx, lease):
        generation = rules.next_generation(lease, holder, now)
        if generation is not None:
            _set(tx, Lease(holder, generation, now + ttl))
        return generation


def renew(conn: Connection[Any], box_id: int, holder: str, generation: int, now: int,
          ttl: int) -> bool:
    """Extend a lease this worker still holds; False once it has lapsed or moved on."""
    with locked(conn, box_id, durable=False) as (tx, lease):
        if not rules.holds(lease, holder, generation, now):
            return False
        _set(tx, Lease(holder, generation, now + ttl))
        return True


def release(conn: Connection[Any], box_id: int, holder: str, generation: int,
            now: int) -> bool:
    """End this worker's lease now, so the next tick need not wait out the TTL."""
    with locked(conn, box_id, durable=False) as (tx, lease):
        if lease is None or not rules.holds(lease, holder, generation, now):
            return False
        _set(tx, rules.release(lease, now))
        return True
