"""The :class:`~agentbox.store.Store` protocol over one inbox of a PostgreSQL database.

Each method delegates to the module that owns its SQL, naming the inbox by
its row id. The inbox row is made by the first write (an ``instance_id``
counts: it is fixed when the inbox is made); until then every read answers
as for an empty inbox. Every public method is wrapped by
:func:`~agentbox.backends.boundary.translating`, so a ``psycopg.Error``
leaves it as the agentbox error a user can act on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from agentbox.backends.boundary import translating
from agentbox.backends.postgres import db, history, inbox, lease
from agentbox.backends.postgres.url import Target, parse
from agentbox.errors import NoInbox
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.records import Status, Vitals

# Runs, timers, approvals and the outbox are imported where used: `agentbox ingest`
# runs once per webhook and needs none of them.
if TYPE_CHECKING:
    from agentbox.backends.postgres.wake import InboxWaiter
    from agentbox.rules.answer import Answer
    from agentbox.rules.approvals import Approval
    from agentbox.rules.health import Check
    from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
    from agentbox.rules.policy import Policy
    from agentbox.rules.records import AddOutcome, Entry, Event, IngestResult, Lease, SendOutcome
    from agentbox.rules.retention import Cutoffs, PruneCounts
    from agentbox.rules.timers import Timer, TimerSpec

_NO_INBOX = 0  # no inbox row has this id: reads through it find nothing


@translating(psycopg.Error, db.translate)
class PostgresStore:
    """The inbox of ``user`` in the database (and schema) a URL names.

    Without ``create`` a missing inbox (or schema) is :class:`~agentbox.errors.NoInbox`
    and nothing is made: what a command that only reads needs.
    """

    # The inbox's instance id, made with its row and never changed: read once, not on
    # every batch (a round trip each).
    _instance: str | None = None

    def __init__(self, url: str, user: str, *, synchronous: str = "FULL",
                 lock_timeout: float | None = None, create: bool = True) -> None:
        from agentbox.paths import check_user

        self.user = check_user(user)
        self.target = parse(url)
        self.location = self.target.location
        self.conn: psycopg.Connection[Any] = db.connect(self.target, synchronous,
                                                        lock_timeout, create)
        self._owns_conn = True
        try:
            self._box = db.find_inbox(self.conn, self.user)
        except psycopg.Error as exc:
            self.conn.close()
            raise db.translate(exc, self.location) from None
        if self._box is None and not create:
            self.conn.close()
            raise NoInbox(f"{self.location} (user {self.user})")

    @classmethod
    def sharing(cls, conn: psycopg.Connection[Any], target: Target, user: str,
                box_id: int) -> PostgresStore:
        """The store of an existing inbox on a connection it shares (and does not close):
        how one process serves every inbox of a schema without a connection each."""
        store = cls.__new__(cls)
        store.user, store.target, store.location = user, target, target.location
        store.conn, store._owns_conn, store._box = conn, False, box_id
        return store

    @property
    def inbox_id(self) -> int | None:
        """The id of this user's ``inboxes`` row; None until its first write."""
        return self._box

    def _reading(self) -> int:
        """The inbox row to read, looked up again while there is none."""
        if self._box is None:
            self._box = db.find_inbox(self.conn, self.user)
        return _NO_INBOX if self._box is None else self._box

    def _reader(self) -> db.Box:
        return db.Box(self.conn, self._reading())

    def _writing(self) -> int:
        """The inbox row to write to, made now if this is its first write."""
        if self._box is None:
            self._box = db.create_inbox(self.conn, self.user)
        return self._box

    def close(self) -> None:
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def instance_id(self) -> str:
        if self._instance is None:
            self._instance = db.instance_id(db.Box(self.conn, self._writing()))
        return self._instance

    def ingest(self, source: str, source_id: str, payload: str, now: int) -> IngestResult:
        return inbox.ingest(self.conn, self._writing(), source, source_id, payload, now)

    def ingest_many(self, items: Iterable[tuple[str, str, str]],
                    now: int) -> list[IngestResult]:
        return inbox.ingest_many(self.conn, self._writing(), items, now)

    def event(self, event_id: int) -> Event | None:
        return inbox.get(self._reader(), event_id)

    def find(self, source: str, source_id: str) -> Event | None:
        return inbox.find(self._reader(), source, source_id)

    def story(self, event_id: int) -> list[Entry]:
        return history.event_story(self._reader(), event_id)

    def dead(self, limit: int | None = None) -> list[Event]:
        return inbox.dead(self._reader(), limit)

    def events(self, states: Sequence[str] = (), source: str | None = None,
               since: int | None = None, until: int | None = None, before: int | None = None,
               limit: int = 100) -> list[Event]:
        return inbox.listing(self._reader(), states, source, since, until, before, limit)

    def replay(self, ids: Sequence[int] | None, now: int) -> list[int]:
        return inbox.replay(self.conn, self._writing(), ids, now)

    def status(self) -> Status:
        from agentbox.backends.postgres import timers

        box = self._reader()
        counts = db.state_counts(box)
        return Status(counts["events"], counts["outbox"], lease.current(box),
                      timers.next_due(box))

    def vitals(self) -> Vitals:
        from agentbox.backends.postgres import upkeep

        box = self._reader()
        return Vitals(self.status(), *upkeep.readings(box), upkeep.disk_bytes(box))

    def lease(self) -> Lease | None:
        return lease.current(self._reader())

    def acquire(self, holder: str, now: int, ttl: int) -> int | None:
        return lease.acquire(self.conn, self._writing(), holder, now, ttl)

    def renew(self, holder: str, generation: int, now: int, ttl: int) -> bool:
        return lease.renew(self.conn, self._writing(), holder, generation, now, ttl)

    def release(self, holder: str, generation: int, now: int) -> bool:
        return lease.release(self.conn, self._writing(), holder, generation, now)

    def claim(self, holder: str, generation: int, now: int,
              policy: Policy) -> list[Event] | None:
        from agentbox.backends.postgres import runs

        return runs.claim(self.conn, self._writing(), holder, generation, now, policy)

    def finish(self, holder: str, generation: int, now: int, ids: Sequence[int],
               answer: Answer | None = None) -> bool:
        from agentbox.backends.postgres import runs

        return runs.finish(self.conn, self._writing(), holder, generation, now, ids, answer)

    def fail(self, holder: str, generation: int, now: int, ids: Sequence[int], error: str,
             policy: Policy) -> bool:
        from agentbox.backends.postgres import runs

        return runs.fail(self.conn, self._writing(), holder, generation, now, ids, error,
                         policy)

    def interrupt(self, holder: str, generation: int, now: int, ids: Sequence[int]) -> bool:
        from agentbox.backends.postgres import runs

        return runs.interrupt(self.conn, self._writing(), holder, generation, now, ids)

    def next_work(self, now: int) -> int | None:
        from agentbox.backends.postgres import runs

        return runs.next_work(self._reader(), now)

    def waiter(self) -> InboxWaiter:
        from agentbox.backends.postgres.wake import InboxWaiter

        def box_id() -> int | None:
            return None if self._reading() == _NO_INBOX else self._box

        return InboxWaiter(self.target, self.conn, box_id)

    def add_timer(self, spec: TimerSpec, now: int, replace: bool = False) -> AddOutcome:
        from agentbox.backends.postgres import timers

        return timers.add(self.conn, self._writing(), spec, now, replace)

    def remove_timer(self, name: str, now: int) -> bool:
        from agentbox.backends.postgres import timers

        return timers.remove(self.conn, self._writing(), name, now)

    def timers(self, include_done: bool = False) -> list[Timer]:
        from agentbox.backends.postgres import timers

        return timers.listing(self._reader(), include_done)

    def timer_events(self, name: str) -> list[Event]:
        from agentbox.backends.postgres import timers

        return timers.events(self._reader(), name)

    def tick(self, now: int, policy: Policy | None = None) -> int:
        from agentbox.backends.postgres import timers

        return timers.tick(self.conn, self._reading(), now, policy)

    def request_approval(self, request_id: str, now: int, expires_in: int,
                         action: str) -> bool:
        from agentbox.backends.postgres import approvals

        return approvals.request(self.conn, self._writing(), request_id, now, expires_in,
                                 action)

    def answer_approval(self, request_id: str, reply: str, now: int) -> str:
        from agentbox.backends.postgres import approvals

        return approvals.answer(self.conn, self._reading(), request_id, reply, now)

    def approvals(self, now: int) -> list[Approval]:
        from agentbox.backends.postgres import approvals

        return approvals.listing(self._reader(), now)

    def claim_dispatch(self, now: int, mode: str, gap: int, timeout: int,
                       max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Dispatch | Wait:
        from agentbox.backends.postgres import outbox

        return outbox.claim(self.conn, self._writing(), now, mode, gap, timeout, max_tries)

    def settle_dispatch(self, key: str, outcome: SendOutcome, now: int,
                        error: str | None = None, *, attempt: int) -> bool:
        from agentbox.backends.postgres import outbox

        return outbox.settle(self.conn, self._writing(), key, outcome, now, error,
                             attempt=attempt)

    def resolve_dispatch(self, key: str, sent: bool, now: int) -> int:
        from agentbox.backends.postgres import outbox

        return outbox.resolve(self.conn, self._writing(), key, sent, now)

    def outbox(self, states: Sequence[str] = ("held", "sending", "uncertain"),
               limit: int = 1000) -> list[OutboxMessage]:
        from agentbox.backends.postgres import outbox

        return outbox.listing(self._reader(), states, limit)

    def prunable(self, cut: Cutoffs) -> PruneCounts:
        from agentbox.backends.postgres import prune

        return prune.prunable(self._reader(), cut)

    def prune_step(self, cut: Cutoffs, limit: int) -> PruneCounts:
        from agentbox.backends.postgres import prune

        return prune.step(self.conn, self._writing(), cut, limit)

    def record_prune(self, now: int) -> None:
        from agentbox.backends.postgres import prune

        prune.record(self.conn, self._writing(), now)

    def reclaim(self, max_pages: int) -> int:
        return 0  # autovacuum hands freed room to new rows by itself

    def backup(self, dest: str, replace: bool = False) -> int:
        from agentbox.backends.postgres import upkeep

        return upkeep.backup(self.conn, self._reading(), dest, replace)

    def checks(self) -> list[Check]:
        from agentbox.backends.postgres import upkeep

        return upkeep.checks(self._reader())
