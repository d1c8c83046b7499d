"""What every part of the ledger stands on: an engine, the inbox's row, and the lock.

A :class:`Core` reads through the engine outside any transaction, writes in
a transaction, and, for everything that must be serialised per inbox, writes
in a transaction that holds the inbox's lock: :meth:`Core.locked` takes the
lock with the statement that reads the lease, so the fence is read as it
stands once the lock is held.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from agentbox.rules.records import Lease

if TYPE_CHECKING:
    from agentbox.ledger.engine import Engine, Params, Reader, Row, Tx

LEASE_COLUMNS = "lease_holder, lease_generation, lease_until, lease_released"
# The key prefix of things made now (see Core.key_prefix), in one read.
KEY_PREFIX = """SELECT COALESCE((SELECT prefix FROM epochs WHERE inbox_id = :box
                                 ORDER BY epoch DESC LIMIT 1), instance)
                FROM inboxes WHERE id = :box"""
# The key prefix of each epoch and its first event id, the newest first: one per
# restore, then the inbox's own instance id from event 1 (see Core.event_keys).
EPOCHS = """SELECT prefix, first_event FROM (
                SELECT prefix, first_event, epoch FROM epochs WHERE inbox_id = :box
                UNION ALL SELECT instance, 1, 0 FROM inboxes WHERE id = :box) AS known
            ORDER BY epoch DESC"""


def keys_of(epochs: Sequence[Row], ids: Iterable[int]) -> dict[int, str]:
    """The idempotency key of each event of ``ids``, from the rows :data:`EPOCHS` read:
    its epoch's prefix, ``-event-``, its id."""
    from agentbox.rules.keys import idempotency_key

    return {i: idempotency_key(next(str(p) for p, first in epochs if i >= int(first)), i)
            for i in ids}


def lease_of(row: tuple[Any, ...] | None) -> Lease | None:
    """The lease of a row that selected :data:`LEASE_COLUMNS` (None: never taken)."""
    if row is None or row[0] is None:
        return None
    return Lease(str(row[0]), int(row[1]), int(row[2]), bool(row[3]))


class Core:
    """One user's inbox on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: Where the inbox lives: a file path, or a PostgreSQL URL without its password.
        self.location = engine.location
        #: The inbox's row id in its database (the engine found or made it as it opened).
        self.inbox_id = engine.box
        self._instance: str | None = None

    def _read(self) -> Reader:
        """Reads of the inbox, each statement on its own."""
        return self.engine.reader(self.inbox_id)

    def _write(self, durable: bool = True) -> AbstractContextManager[Tx]:
        """A transaction that does not take the inbox's lock (a conflict's note, say)."""
        return self.engine.write(self.inbox_id, durable=durable)

    def group(self) -> AbstractContextManager[None] | None:
        """One transaction for every write made inside it, committed once (see
        :meth:`~agentbox.ledger.engine.Engine.group`); None where the engine groups
        concurrent commits itself. :class:`agentbox.groupcommit.GroupCommit` uses it."""
        return self.engine.group()

    @contextmanager
    def _locked(self, durable: bool = True) -> Iterator[tuple[Tx, Lease | None]]:
        """A transaction holding the inbox's lock, and the lease as it stands under it."""
        with self._write(durable) as tx:
            yield tx, lease_of(tx.one(self._lock_read()))

    @contextmanager
    def _locked_reading(self, *queries: tuple[str, Params]
                        ) -> Iterator[tuple[Tx, Lease | None, list[list[Row]]]]:
        """:meth:`_locked`, and the rows of each of ``queries`` read under the lock, sent
        with the statement that takes it (one round trip for all where the engine can)."""
        with self._write() as tx:
            lease, *rows = tx.reads((self._lock_read(), {}), *queries)
            yield tx, lease_of(lease[0] if lease else None), rows

    def _lock_read(self) -> str:
        return f"SELECT {LEASE_COLUMNS} FROM inboxes WHERE id = :box{self.engine.lock_clause}"

    def instance_id(self) -> str:
        """A random id fixed when the inbox was made: it makes keys unique across inboxes.

        It does not change with a restore: a key built on it alone could be handed
        out again after one. A key of something made now is built on
        :meth:`key_prefix` instead, which is this id until the inbox's first restore.
        """
        if self._instance is None:
            row = self._read().one("SELECT instance FROM inboxes WHERE id = :box")
            assert row is not None
            self._instance = str(row[0])
        return self._instance

    def key_prefix(self) -> str:
        """What every key made now starts with (events, dispatches, and whatever else
        builds a key on the inbox): the instance id, and after a restore the prefix of
        the restore's epoch, so nothing made after a restore takes a key the replaced
        inbox may have given out after the backup was taken. Read afresh each call."""
        row = self._read().one(KEY_PREFIX)
        assert row is not None
        return str(row[0])

    def event_keys(self, ids: Sequence[int]) -> dict[int, str]:
        """The idempotency key of each event: its epoch's prefix, ``-event-``, its id.
        An event keeps its key for good; a restore changes only the keys to come (each
        restore begins an epoch: see ``restore``)."""
        return keys_of(self._read().rows(EPOCHS), ids)

    def lease(self) -> Lease | None:
        """The lease as it stands (it may have expired)."""
        return lease_of(self._read().one(f"SELECT {LEASE_COLUMNS} FROM inboxes WHERE id = :box"))

    def close(self) -> None:
        """Release the connection; the store is unusable afterwards."""
        self.engine.close()


def among(values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``(:in0, :in1, …)`` and its parameters: a list in SQL both engines read.

    Callers keep lists short (a run's batch, one dispatch's messages) and put one
    list in a statement, whose other parameters are never named ``in`` and a
    number; an empty list gives ``(NULL)``, which matches nothing.
    """
    if not values:
        return "(NULL)", {}
    names = [f"in{n}" for n in range(len(values))]
    return "(" + ", ".join(f":{n}" for n in names) + ")", dict(zip(names, values, strict=True))
