"""The seam: everything agentbox keeps, behind one protocol, on any backend.

Every command, the worker, the dispatcher, the scenario runner and the
contract test suite (``tests/contract``) speak only to :class:`Store`. A
backend stores, locks and queries; the rules it applies come from
:mod:`agentbox.rules`, and its driver's errors are translated inside it into
agentbox's own (:class:`~agentbox.errors.Busy` when the database stays
locked, :class:`~agentbox.errors.DatabaseError` when it cannot be used), so
nothing above this module knows which database it talks to.

Time is always an argument (``now``, integer Unix seconds): a store never
reads the clock.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES

if TYPE_CHECKING:
    from agentbox.rules.answer import Answer
    from agentbox.rules.approvals import Approval
    from agentbox.rules.health import Check
    from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
    from agentbox.rules.policy import Policy
    from agentbox.rules.records import (
        AddOutcome,
        Entry,
        Event,
        IngestResult,
        Lease,
        SendOutcome,
        Status,
        Vitals,
    )
    from agentbox.rules.retention import Cutoffs, PruneCounts
    from agentbox.rules.timers import Timer, TimerSpec

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
POSTGRES_EXTRA = "PostgreSQL needs the postgres extra, psycopg 3: pip install 'psycopg[binary]'"


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

    def close(self) -> None:
        """Stop watching."""


class InboxesWaiter(Protocol):
    """How a worker serving every inbox sleeps: until any of them changes."""

    def wait(self, timeout: float) -> set[str] | None:
        """Sleep until inboxes change, or ``timeout`` seconds pass.

        Returns the users whose inboxes changed (new inboxes included; empty
        after a timeout), or None when any inbox may have changed (the
        backend lost track, say), so the caller looks at all of them.
        """

    def close(self) -> None:
        """Stop watching."""


class Store(Protocol):
    """One user's inbox: events, lease, timers, approvals and outbox."""

    #: Where the inbox lives: a file path, or a PostgreSQL URL without its password.
    location: str

    def close(self) -> None:
        """Release the connection; the store is unusable afterwards."""

    def __enter__(self) -> Store:
        """``with`` closes the store on the way out."""

    def __exit__(self, *exc: object) -> None: ...

    def instance_id(self) -> str:
        """A random id fixed when the inbox was created: it makes keys unique across inboxes."""

    # -- inbox ---------------------------------------------------------------

    def ingest(self, source: str, source_id: str, payload: str, now: int) -> IngestResult:
        """Store one event whose payload is canonical JSON, once per (source, source_id).

        The same key again with the same payload is ``duplicate``; with another
        payload ``conflict`` (the first stands, the refusal is in its history).
        """

    def ingest_many(self, items: Iterable[tuple[str, str, str]],
                    now: int) -> list[IngestResult]:
        """Store many (source, source_id, payload) items, in order, in one transaction.

        All or nothing: the caller sizes the batch (``agentbox ingest --jsonl``
        sends a few thousand at a time), which bounds how long it holds writers up.
        """

    def event(self, event_id: int) -> Event | None:
        """One event by id, in any state."""

    def find(self, source: str, source_id: str) -> Event | None:
        """The event stored under a key, if any."""

    def story(self, event_id: int) -> list[Entry]:
        """An event's history, oldest first: stored, claimed, failed, dead, replayed, …"""

    def dead(self, limit: int | None = None) -> list[Event]:
        """Dead events, oldest first."""

    def events(self, states: Sequence[str] = (), source: str | None = None,
               since: int | None = None, until: int | None = None, before: int | None = None,
               limit: int = 100) -> list[Event]:
        """The newest ``limit`` events that match every filter given, oldest first.

        ``states``: any of them (none given: every state); ``since``/``until``:
        arrival (``created_at``) at or after / before; ``before``: ids below it,
        so a caller pages back through the inbox by id. Costs the same on a
        million events as on ten thousand when the matches are recent or in a
        short state.
        """

    def replay(self, ids: Sequence[int] | None, now: int) -> list[int]:
        """Dead events back to pending with attempts reset (all of them for ``None``).

        Returns the ids replayed; ids that are not dead are left alone.
        """

    def status(self) -> Status:
        """Counts per state (every state present), the lease, and the next timer."""

    def vitals(self) -> Vitals:
        """The status, plus what an operator watches: the oldest pending event's
        arrival, the last run, prune and activity, and the bytes on disk."""

    # -- lease and runs ------------------------------------------------------

    def lease(self) -> Lease | None:
        """The lease as it stands (it may have expired)."""

    def acquire(self, holder: str, now: int, ttl: int) -> int | None:
        """Take or renew the lease until ``now + ttl``: the generation, or None when
        another holder's lease is still live. A takeover bumps the generation."""

    def renew(self, holder: str, generation: int, now: int, ttl: int) -> bool:
        """Extend a lease this holder still holds; False once it lapsed or moved on."""

    def release(self, holder: str, generation: int, now: int) -> bool:
        """End the lease now (fenced), so the next worker need not wait out the TTL."""

    def claim(self, holder: str, generation: int, now: int,
              policy: Policy) -> list[Event] | None:
        """Claim one run's batch behind the fence; None when the lease is not ours.

        Events abandoned by an older generation go back to pending, those out of
        attempts go dead, then a retried event alone or up to ``max_batch``
        fresh ones are claimed, each attempt counted now.
        """

    def finish(self, holder: str, generation: int, now: int, ids: Sequence[int],
               answer: Answer | None = None) -> bool:
        """Mark a run's events done and write its answer, in one fenced transaction.

        False (and nothing written) when the lease or any event is no longer
        this run's; a bad answer raises and writes nothing.
        """

    def fail(self, holder: str, generation: int, now: int, ids: Sequence[int], error: str,
             policy: Policy) -> bool:
        """Record a handler error: retry after the backoff, or dead on the last attempt."""

    def interrupt(self, holder: str, generation: int, now: int, ids: Sequence[int]) -> bool:
        """Give a stopped run's events back: pending again, the attempt given back.

        An asked-for stop (SIGTERM, Ctrl-C) is not the event's fault, so it
        never moves an event towards dead; the history says ``interrupted``.
        Fenced like :meth:`finish`: False, and nothing changed, when the lease
        or any event is no longer this run's.
        """

    def next_work(self, now: int) -> int | None:
        """When a run next has something to do here, or None when nothing is scheduled.

        A time at or before ``now`` means there is work now: a pending event
        is available or a timer is due. Otherwise the earliest of: a pending
        retry's ``available_at``, the next timer, and the end of the lease
        holding events that are still ``running``. Reads only.
        """

    def waiter(self) -> Waiter:
        """A :class:`Waiter` on this inbox, blind to changes made through this store."""

    # -- timers and approvals ------------------------------------------------

    def add_timer(self, spec: TimerSpec, now: int, replace: bool = False) -> AddOutcome:
        """Add a timer; re-adding an unchanged one is a no-op, a changed one needs
        ``replace`` (else NotAsAsked)."""

    def remove_timer(self, name: str, now: int) -> bool:
        """Delete a timer; False if there is none. An approval's expiry is refused."""

    def timers(self, include_done: bool = False) -> list[Timer]:
        """Timers by due time; spent one-offs only with ``include_done``."""

    def tick(self, now: int, policy: Policy | None = None) -> int:
        """One scheduler pass: each due timer's events stored and the timer moved on,
        in one transaction. Returns how many timers were due."""

    def timer_events(self, name: str) -> list[Event]:
        """The events a timer has put into the inbox, oldest first."""

    def request_approval(self, request_id: str, now: int, expires_in: int,
                         action: str) -> bool:
        """Record a request and its expiry timer; False if the id was requested before."""

    def answer_approval(self, request_id: str, reply: str, now: int) -> str:
        """Answer yes or no; returns the outcome that stands (yes, no, expired, unknown)."""

    def approvals(self, now: int) -> list[Approval]:
        """Every request with its outcome as of ``now``."""

    # -- outbox --------------------------------------------------------------

    def claim_dispatch(self, now: int, mode: str, gap: int, timeout: int,
                       max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Dispatch | Wait:
        """Claim the next send (an overdue resend of a key first), or say why not.

        ``mode`` and ``max_tries`` are recorded on a new claim and hold for all
        its tries; what a try's word does is :func:`agentbox.rules.outbox.on_settle`.
        """

    def settle_dispatch(self, key: str, outcome: SendOutcome, now: int,
                        error: str | None = None, *, attempt: int) -> bool:
        """Record the sender's word for try ``attempt``; False when it changed nothing."""

    def resolve_dispatch(self, key: str, sent: bool, now: int) -> int:
        """An operator's verdict on an uncertain dispatch; returns its message count."""

    def outbox(self, states: Sequence[str] = ("held", "sending", "uncertain"),
               limit: int = 1000) -> list[OutboxMessage]:
        """Messages in ``states``, oldest first; past ``limit``, the newest ones."""

    # -- upkeep --------------------------------------------------------------

    def prunable(self, cut: Cutoffs) -> PruneCounts:
        """What :meth:`prune_step` calls would remove at these cutoffs (a dry run)."""

    def prune_step(self, cut: Cutoffs, limit: int) -> PruneCounts:
        """One short transaction removing at most ``limit`` rows (and their history)
        that :mod:`agentbox.rules.retention` lets go, oldest first: done events
        (their keys and payload digests remembered until ``cut.remembered_until``),
        then sent messages, settled dispatches, remembered keys past the window,
        and timer history. A total below ``limit`` means nothing is left.

        While a key is remembered, ingesting it again is ``duplicate`` (same
        digest) or ``conflict`` (another), with the pruned event's id, and
        nothing is stored.
        """

    def record_prune(self, now: int) -> None:
        """Note that a prune completed at ``now`` (``vitals().last_prune``)."""

    def reclaim(self, max_pages: int) -> int:
        """Hand space freed by pruning back to the disk, a bounded amount per call
        (one short transaction); returns how much was handed back, 0 when
        nothing is left (or the backend does this by itself)."""

    def backup(self, dest: str, replace: bool = False) -> int:
        """Write a consistent copy to the file ``dest`` (0600) while writers carry on;
        ``open_store(dest, user)`` opens it. An existing ``dest`` is a UsageError
        unless ``replace``. Returns the copy's size in bytes."""

    def checks(self) -> list[Check]:
        """The backend's own health checks: integrity, schema version, permissions,
        journal size (see :mod:`agentbox.rules.health`)."""


def is_url(target: str | os.PathLike[str]) -> bool:
    """A PostgreSQL URL rather than a file path."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def named(db: str | os.PathLike[str] | None = None, user: str | None = None) -> str | None:
    """The inbox named by ``db``, else ``$AGENTBOX_DB``, else the ``database`` setting;
    None when none is, and the user's own file under the data folder is meant."""
    chosen = os.fspath(db) if db else os.environ.get("AGENTBOX_DB")
    if chosen:
        return chosen
    from agentbox import config, paths

    return config.resolve(paths.config_path(), paths.resolve_user(user)).database


def locate(db: str | os.PathLike[str] | None = None, user: str | None = None, *,
           make_folder: bool = True) -> str:
    """Where an inbox lives: :func:`named`, else the user's own file under the data
    folder (its folder made 0700 unless ``make_folder`` is false).

    A file path comes back absolute, so a handler or sender told about it finds
    the same inbox from any working directory. ``user`` is checked only when it
    is needed to find the file.
    """
    chosen = named(db, user)
    if not chosen:
        from agentbox import paths

        path = paths.inbox_path(paths.resolve_user(user))
        if make_folder:
            paths.private_dir(path.parent)
        return str(path)
    return chosen if is_url(chosen) else os.path.abspath(chosen)


def locate_inboxes(db: str | os.PathLike[str] | None = None) -> str:
    """Where every user's inbox lives, for a process serving them all: a PostgreSQL URL
    from ``db``, ``$AGENTBOX_DB`` or the top-level ``database`` setting, else the data
    folder's ``inboxes``. A single inbox file cannot stand for all users (UsageError)."""
    from agentbox import config, paths
    from agentbox.errors import UsageError

    chosen = (os.fspath(db) if db else os.environ.get("AGENTBOX_DB")
              or config.resolve(paths.config_path(), "").database)
    if not chosen:
        return str(paths.data_dir() / "inboxes")
    if is_url(chosen):
        return chosen
    raise UsageError(f"--all-users serves every inbox of the data folder or of a "
                     f"PostgreSQL database, and {chosen} is a single inbox file")


def open_store(target: str | os.PathLike[str], user: str, *, synchronous: str = "FULL",
               make_folders: bool = False, busy_timeout: float | None = None,
               create: bool = True) -> Store:
    """Open the inbox of ``user`` at ``target``.

    For SQLite the file is the inbox (``user`` is not needed); a
    ``postgresql://`` URL names a database (and schema) holding every user's
    inbox. Without psycopg installed a URL is a usage error (exit 2) naming the
    extra to install; a SQLite user never imports it.

    ``busy_timeout`` (seconds) bounds how long a write waits for the inbox's
    lock before :class:`~agentbox.errors.Busy`, for a caller that must answer
    sooner than the backend's own wait (a server whose clients give up).
    With ``create`` false a missing inbox raises :class:`~agentbox.errors.NoInbox`
    and nothing is made: what a command that only reads needs.
    """
    if is_url(target):
        with _postgres_driver():
            from agentbox.backends.postgres.store import PostgresStore
        return PostgresStore(str(target), user, synchronous=synchronous, create=create,
                             lock_timeout=busy_timeout)
    from agentbox.backends.sqlite.store import SqliteStore

    return SqliteStore(target, synchronous=synchronous, make_folders=make_folders,
                       create=create, busy_timeout=busy_timeout)


class Inboxes(Protocol):
    """Every user's inbox at one location: what `run --watch --all-users` serves."""

    #: The folder of inbox files, or the PostgreSQL URL without its password.
    location: str

    def users(self) -> list[str]:
        """Every user with an inbox here, sorted."""

    def store(self, user: str) -> Store:
        """The store of one existing inbox, opened once and kept until :meth:`close`."""

    def next_work(self, now: int, users: Collection[str]) -> dict[str, int]:
        """:meth:`Store.next_work` of each of ``users`` that has anything scheduled.

        Inboxes that cannot be read are left out; see :meth:`failures`.
        """

    def failures(self) -> dict[str, str]:
        """Inboxes that could not be opened or read since the last call, with the reason."""

    def waiter(self) -> InboxesWaiter:
        """An :class:`InboxesWaiter` on every inbox here, new ones included."""

    def close(self) -> None:
        """Close every store opened through this object."""


def open_inboxes(target: str | os.PathLike[str]) -> Inboxes:
    """Every inbox at ``target``: a folder of SQLite files, or a PostgreSQL URL."""

    if is_url(target):
        with _postgres_driver():
            from agentbox.backends.postgres.inboxes import PostgresInboxes
        return PostgresInboxes(str(target))
    from agentbox.backends.sqlite.inboxes import SqliteInboxes

    return SqliteInboxes(Path(target))


def empty_view(location: str) -> Store:
    """An empty inbox that refuses every write, for ``location`` where none exists:
    a command that only reads answers from it as from a new inbox (a PostgreSQL
    URL is shown without its password)."""
    from agentbox.backends.sqlite.store import SqliteStore

    if is_url(location):
        from agentbox.backends.postgres.url import parse

        location = parse(location).location
    return SqliteStore.empty(location)



@contextmanager
def _postgres_driver() -> Iterator[None]:
    """Imports of the PostgreSQL backend: a missing psycopg is one line naming the extra."""
    try:
        yield
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "psycopg":
            raise
        from agentbox.errors import UsageError

        raise UsageError(POSTGRES_EXTRA) from None


@contextmanager
def scratch_store(base: str | None = None, user: str = "scratch") -> Iterator[Store]:
    """A fresh, empty inbox that is removed afterwards, with durability off.

    By default a temporary SQLite file; given a PostgreSQL URL, a temporary
    schema in that database (which needs the right to create one). The
    scenario runner replays every scenario in one.
    """
    if base is not None and is_url(base):
        with _postgres_driver():
            from agentbox.backends.postgres.db import temporary_schema
        with (temporary_schema(base, "agentbox_scratch") as url,
              open_store(url, user, synchronous="OFF") as store):
            yield store
        return
    import tempfile

    with (tempfile.TemporaryDirectory(prefix="agentbox-scratch-") as folder,
          open_store(os.path.join(folder, "inbox.sqlite3"), user, synchronous="OFF") as store):
        yield store
