"""The :class:`~agentbox.store.Store` protocol over one SQLite file.

Each method delegates to the module that owns its SQL. Every public method
is wrapped by :func:`~agentbox.backends.boundary.translating`: an
``sqlite3.Error`` escaping it becomes the agentbox error a user can act on,
so nothing above the store sees the driver.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from agentbox.backends.boundary import translating
from agentbox.backends.sqlite import db, inbox, lease
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.records import Status, Vitals

# Runs, timers, approvals and the outbox are imported where used: `agentbox ingest`
# runs once per webhook and needs none of them.
if TYPE_CHECKING:
    from agentbox.backends.sqlite.wake import InboxWaiter
    from agentbox.rules.answer import Answer
    from agentbox.rules.approvals import Approval
    from agentbox.rules.health import Check
    from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
    from agentbox.rules.policy import Policy
    from agentbox.rules.records import AddOutcome, Entry, Event, IngestResult, Lease, SendOutcome
    from agentbox.rules.retention import Cutoffs, PruneCounts
    from agentbox.rules.timers import Timer, TimerSpec


@translating(sqlite3.Error, db.translate)
class SqliteStore:
    """One user's inbox in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "FULL",
                 make_folders: bool = True, create: bool = True,
                 busy_timeout: float | None = None) -> None:
        self.location = os.fspath(path)
        self.conn: sqlite3.Connection = db.connect(path, synchronous=synchronous,
                                                   make_folders=make_folders, create=create,
                                                   busy_timeout=busy_timeout)

    @classmethod
    def empty(cls, location: str) -> SqliteStore:
        """An empty inbox in memory that refuses writes, standing for ``location``."""
        store = cls.__new__(cls)
        store.location = location
        store.conn = db.connect_empty()
        return store

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def instance_id(self) -> str:
        return db.instance_id(self.conn)

    def ingest(self, source: str, source_id: str, payload: str, now: int) -> IngestResult:
        return inbox.ingest(self.conn, source, source_id, payload, now)

    def ingest_many(self, items: Iterable[tuple[str, str, str]],
                    now: int) -> list[IngestResult]:
        return inbox.ingest_many(self.conn, items, now)

    def event(self, event_id: int) -> Event | None:
        return inbox.get(self.conn, event_id)

    def find(self, source: str, source_id: str) -> Event | None:
        return inbox.find(self.conn, source, source_id)

    def story(self, event_id: int) -> list[Entry]:
        return inbox.story(self.conn, event_id)

    def dead(self, limit: int | None = None) -> list[Event]:
        return inbox.dead(self.conn, limit)

    def events(self, states: Sequence[str] = (), source: str | None = None,
               since: int | None = None, until: int | None = None, before: int | None = None,
               limit: int = 100) -> list[Event]:
        return inbox.listing(self.conn, states, source, since, until, before, limit)

    def replay(self, ids: Sequence[int] | None, now: int) -> list[int]:
        return inbox.replay(self.conn, ids, now)

    def status(self) -> Status:
        from agentbox.backends.sqlite import timers

        return Status(db.state_counts(self.conn, "events"), db.state_counts(self.conn, "outbox"),
                      lease.current(self.conn), timers.next_due(self.conn))

    def vitals(self) -> Vitals:
        from agentbox.backends.sqlite import upkeep

        return Vitals(self.status(), *upkeep.readings(self.conn),
                      upkeep.disk_bytes(self.location))

    def lease(self) -> Lease | None:
        return lease.current(self.conn)

    def acquire(self, holder: str, now: int, ttl: int) -> int | None:
        return lease.acquire(self.conn, holder, now, ttl)

    def renew(self, holder: str, generation: int, now: int, ttl: int) -> bool:
        return lease.renew(self.conn, holder, generation, now, ttl)

    def release(self, holder: str, generation: int, now: int) -> bool:
        return lease.release(self.conn, holder, generation, now)

    def claim(self, holder: str, generation: int, now: int,
              policy: Policy) -> list[Event] | None:
        from agentbox.backends.sqlite import runs

        return runs.claim(self.conn, holder, generation, now, policy)

    def finish(self, holder: str, generation: int, now: int, ids: Sequence[int],
               answer: Answer | None = None) -> bool:
        from agentbox.backends.sqlite import runs

        return runs.finish(self.conn, holder, generation, now, ids, answer)

    def fail(self, holder: str, generation: int, now: int, ids: Sequence[int], error: str,
             policy: Policy) -> bool:
        from agentbox.backends.sqlite import runs

        return runs.fail(self.conn, holder, generation, now, ids, error, policy)

    def interrupt(self, holder: str, generation: int, now: int, ids: Sequence[int]) -> bool:
        from agentbox.backends.sqlite import runs

        return runs.interrupt(self.conn, holder, generation, now, ids)

    def next_work(self, now: int) -> int | None:
        from agentbox.backends.sqlite import runs

        return runs.next_work(self.conn, now)

    def waiter(self) -> InboxWaiter:
        from agentbox.backends.sqlite.wake import InboxWaiter

        return InboxWaiter(self.conn, self.location)

    def add_timer(self, spec: TimerSpec, now: int, replace: bool = False) -> AddOutcome:
        from agentbox.backends.sqlite import timers

        return timers.add(self.conn, spec, now, replace)

    def remove_timer(self, name: str, now: int) -> bool:
        from agentbox.backends.sqlite import timers

        return timers.remove(self.conn, name, now)

    def timers(self, include_done: bool = False) -> list[Timer]:
        from agentbox.backends.sqlite import timers

        return timers.listing(self.conn, include_done)

    def timer_events(self, name: str) -> list[Event]:
        from agentbox.backends.sqlite import timers

        return timers.events(self.conn, name)

    def tick(self, now: int, policy: Policy | None = None) -> int:
        from agentbox.backends.sqlite import timers

        return timers.tick(self.conn, now, policy)

    def request_approval(self, request_id: str, now: int, expires_in: int,
                         action: str) -> bool:
        from agentbox.backends.sqlite import approvals

        return approvals.request(self.conn, request_id, now, expires_in, action)

    def answer_approval(self, request_id: str, reply: str, now: int) -> str:
        from agentbox.backends.sqlite import approvals

        return approvals.answer(self.conn, request_id, reply, now)

    def approvals(self, now: int) -> list[Approval]:
        from agentbox.backends.sqlite import approvals

        return approvals.listing(self.conn, now)

    def claim_dispatch(self, now: int, mode: str, gap: int, timeout: int,
                       max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Dispatch | Wait:
        from agentbox.backends.sqlite import outbox

        return outbox.claim(self.conn, now, mode, gap, timeout, max_tries)

    def settle_dispatch(self, key: str, outcome: SendOutcome, now: int,
                        error: str | None = None, *, attempt: int) -> bool:
        from agentbox.backends.sqlite import outbox

        return outbox.settle(self.conn, key, outcome, now, error, attempt=attempt)

    def resolve_dispatch(self, key: str, sent: bool, now: int) -> int:
        from agentbox.backends.sqlite import outbox

        return outbox.resolve(self.conn, key, sent, now)

    def outbox(self, states: Sequence[str] = ("held", "sending", "uncertain"),
               limit: int = 1000) -> list[OutboxMessage]:
        from agentbox.backends.sqlite import outbox

        return outbox.listing(self.conn, states, limit)

    def prunable(self, cut: Cutoffs) -> PruneCounts:
        from agentbox.backends.sqlite import prune

        return prune.prunable(self.conn, cut)

    def prune_step(self, cut: Cutoffs, limit: int) -> PruneCounts:
        from agentbox.backends.sqlite import prune

        return prune.step(self.conn, cut, limit)

    def record_prune(self, now: int) -> None:
        from agentbox.backends.sqlite import prune

        prune.record(self.conn, now)

    def reclaim(self, max_pages: int) -> int:
        from agentbox.backends.sqlite import prune

        return prune.reclaim(self.conn, max_pages)

    def backup(self, dest: str, replace: bool = False) -> int:
        from agentbox.backends.sqlite import upkeep

        return upkeep.backup(self.conn, dest, replace)

    def checks(self) -> list[Check]:
        from agentbox.backends.sqlite import upkeep

        return upkeep.checks(self.conn, self.location)
