"""The seam: what a backend does for the ledger, and nothing more.

The ledger (every other module of this package) writes each transaction once,
as SQL that both engines run, over the small interface below; a backend
implements it with its driver: how to connect and migrate, how a write
transaction takes the inbox's lock, the one statement that stores an event
fast, how the per-state tallies are kept and read, how watchers are woken,
and how the file or the server is looked after.

The SQL the ledger hands over is written with named parameters (``:name``)
and scopes every row by ``inbox_id = :box``; a reader or a transaction fills
in ``box`` itself. A backend's driver errors never leave it: each engine turns
them into agentbox's own (:class:`~agentbox.errors.Busy` when the database
stays locked, :class:`~agentbox.errors.DatabaseError` when it cannot be used,
:class:`~agentbox.errors.BadInput` for a value it cannot store), so nothing
above this seam knows which database it talks to.

Everything here is for the type checker: the ledger and the backends import it
only under ``TYPE_CHECKING``, so no protocol is built by a running agentbox
(an ingest would pay for every one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentbox.rules.health import Check

Row = tuple[Any, ...]
Params = Mapping[str, Any]
Key = tuple[str, str]  # (source, source_id)
Standing = tuple[int, str]  # (id, canonical payload) of the event stored under a key


class Reader(Protocol):
    """Reads of one inbox: each its own statement, or part of a transaction."""

    #: The inbox's row id, passed to every statement as ``:box``.
    box: int

    def rows(self, sql: str, /, **params: Any) -> list[Row]:
        """Every row a statement returns (a read, or a write with RETURNING)."""
        ...

    def one(self, sql: str, /, **params: Any) -> Row | None:
        """The first row a statement returns, or None."""
        ...


class Snapshot(Reader, Protocol):
    """Reads that all see one moment of the inbox (see :meth:`Engine.snapshot`)."""

    def chunks(self, sql: str, size: int, /, **params: Any) -> Iterator[list[Row]]:
        """The rows of a long read, ``size`` at a time, none held beyond that."""
        ...


class Tx(Reader, Protocol):
    """One write transaction on one inbox: COMMIT when its block ends, ROLLBACK when
    anything escapes it.

    A statement run through :meth:`run` or :meth:`many` may be held back and
    sent with the next read or the COMMIT (a round trip saved); the order of
    statements is kept either way.
    """

    def run(self, sql: str, /, **params: Any) -> None:
        """A write whose answer nobody reads."""
        ...

    def many(self, sql: str, rows: Iterable[Params]) -> None:
        """One write over many rows of parameters (``box`` filled in for each)."""
        ...

    def reads(self, *queries: tuple[str, Params]) -> list[list[Row]]:
        """The rows of each of several statements, run in order and sent together where
        the engine can (one round trip for all): each statement still sees what those
        before it did, the locks they took included."""
        ...

    def last(self, sql: str, /, **params: Any) -> list[Row]:
        """The rows of the transaction's last statement, sent with the COMMIT where the
        engine can (a round trip saved); nothing may be run after it."""
        ...


class Waiter(Protocol):
    """How a watching worker sleeps: until another process changes its inbox.

    A backend wakes it its own way (SQLite: the file's change notifications,
    confirmed by ``PRAGMA data_version``; PostgreSQL: LISTEN/NOTIFY). Changes
    made through the store that made the waiter never wake it, so a worker is
    not woken by its own claims and renewals.
    """

    def wait(self, timeout: float) -> bool:
        """Sleep until another process changed the inbox, or ``timeout`` seconds passed.

        True when woken by a change. A change made since the previous call
        returned (or since the waiter was made) returns at once.
        """
        ...

    def close(self) -> None:
        """Stop watching."""
        ...


class Engine(Protocol):
    """One inbox's database, as a backend reaches it."""

    #: Where the inbox lives: a file path, or a PostgreSQL URL without its password.
    location: str
    #: What the statement reading the inbox's row inside a write transaction ends
    #: with, to lock that row ("" where the transaction holds the lock already).
    lock_clause: str
    #: The inbox's row id in ``inboxes``, found or made as the engine opened: an engine
    #: is never of an inbox that is not there (one opened only to read is refused).
    box: int

    def reader(self, box: int) -> Reader:
        """Reads outside any transaction, each statement on its own."""
        ...

    def glance(self, box: int) -> Reader | None:
        """Reads for a look before a write, that never wait for a lock (one held
        against them is :class:`~agentbox.errors.Busy`), or None where a read costs
        a round trip. An ingest looks its key up through it first, so that a
        redelivery is answered without the write lock."""
        ...

    def write(self, box: int, *, durable: bool) -> AbstractContextManager[Tx]:
        """A write transaction. ``durable=False`` commits without waiting for the disk:
        still atomic, carried to disk by the next durable commit, lost only if the
        machine goes down first (lease writes use it)."""
        ...

    def snapshot(self, box: int) -> AbstractContextManager[Snapshot]:
        """Reads that all see one moment of the inbox while writers carry on."""
        ...

    def group(self) -> AbstractContextManager[None] | None:
        """One write transaction that every write made inside it joins (each as a
        savepoint: one that fails is undone alone), committed once for all of them.
        Where the engine lets one writer in at a time (SQLite), a process's
        concurrent writers commit together this way, one sync to disk for the
        group; None where the engine groups concurrent commits itself (PostgreSQL)."""
        ...

    def store_event(self, tx: Tx | None, box: int, source: str, source_id: str,
                    payload: str, now: int) -> int | Standing | None:
        """Store a new event under its key in one statement, counted and announced to
        watchers: its id; or, when the key is taken, the event standing under it where
        the same statement can read it (PostgreSQL: a redelivery is one round trip);
        else None (taken, or still remembered after a prune), and the ledger looks.
        ``tx`` None: the statement is its own transaction (the fast path)."""
        ...

    def store_events(self, tx: Tx, items: Sequence[tuple[str, str, str]],
                     now: int) -> dict[Key, int]:
        """Store a batch's new keys in one statement: the id of each key stored, taken
        from the first line that names it."""
        ...

    def new_id(self, table: str, n: int) -> str:
        """The SQL value of the ``n``-th (from 1) row a statement inserts into ``table``
        (events, outbox) as its id: above every id the inbox has handed out, even one
        whose row is gone, so that no id (and no key made of it) is given twice."""
        ...

    def counts(self, reader: Reader) -> dict[str, dict[str, int]]:
        """Rows per state of the counted tables (events, outbox), from the kept tallies."""
        ...

    def recount(self, tx: Tx) -> None:
        """Set the kept tallies from the rows themselves (after rows were copied in)."""
        ...

    def waiter(self, box: Callable[[], int | None]) -> Waiter:
        """A :class:`Waiter` on the inbox ``box()`` names (None: not made yet)."""
        ...

    def checks(self) -> list[Check]:
        """The backend's own health checks: integrity, schema version, permissions and,
        where the engine keeps one, the size of its journal."""
        ...

    def disk_bytes(self, reader: Reader) -> int:
        """What the inbox takes on disk (for a shared database: what the schema takes)."""
        ...

    def reclaim(self, budget: int) -> int:
        """Hand space freed by pruning back to the disk, at most ``budget`` units in one
        short step; how much was handed back, 0 once nothing is left (or where the
        engine does this by itself)."""
        ...

    def copy_file(self, dest: Path) -> bool:
        """Write a consistent copy of the whole inbox to the new file ``dest`` by the
        engine's own means; False where it has none (the ledger copies row by row)."""
        ...

    def close(self) -> None:
        """Release the connection; the engine is unusable afterwards."""
        ...
