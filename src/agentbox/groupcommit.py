"""Group commit: a server's threads write to one SQLite inbox together, one sync per group.

SQLite lets one writer in at a time and every durable commit waits for the
disk: twenty threads each committing alone queue twenty syncs, and the last
in line waits for all of them. Here the thread that finds no group being
written becomes its leader: it takes every write queued so far, runs each
inside one transaction (each its own savepoint, so one that fails is undone
alone and fails alone), commits once, and hands each thread its own result;
the writes that queued meanwhile are the next group's. No thread is answered
before the transaction holding its write committed.

Threads queue on a lock in the process, not in SQLite's busy handler, which
sleeps in steps up to 100 ms between looks and would set the slowest answers;
other processes (`run`, `ingest`) still queue in SQLite. Waiting counts
against the busy bound: a write not begun within it is :class:`Busy`, and
nothing of it is written. On an engine that groups concurrent commits itself
(PostgreSQL) each write simply runs in its own thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Generic, TypeVar

from agentbox.errors import Busy

if TYPE_CHECKING:
    from agentbox.ledger.store import Store

T = TypeVar("T")
MAX_GROUP = 64  # writes in one transaction: a group's commit stays short


class _Write(Generic[T]):
    __slots__ = ("done", "error", "job", "value")

    def __init__(self, job: Callable[[Store], T]) -> None:
        self.job = job
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def run(self, store: Store) -> None:
        try:
            self.value = self.job(store)
        except Exception as exc:  # this write's own failure, handed to its thread
            self.error = exc

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class GroupCommit:
    """The writes of one process's threads to one inbox, committed in groups."""

    def __init__(self, timeout: float, max_group: int = MAX_GROUP) -> None:
        self._timeout = timeout
        self._max_group = max_group
        self._changed = threading.Condition()
        self._queue: list[_Write[object]] = []
        self._leading = False

    def run(self, store: Store, job: Callable[[Store], T]) -> T:
        """``job(s)`` with ``s`` a store whose writes join a group's transaction: its
        result (or its exception) once that transaction committed. ``store`` is the
        calling thread's own, used if this thread leads the group."""
        group = store.group()
        if group is None:
            return job(store)
        mine: _Write[T] = _Write(job)
        queued: _Write[object] = mine  # type: ignore[assignment]
        deadline = time.monotonic() + self._timeout
        with self._changed:
            self._queue.append(queued)
            while self._leading and not mine.done:
                left = deadline - time.monotonic()
                if left <= 0 and queued in self._queue:
                    self._queue.remove(queued)
                    raise Busy(f"no turn at the database within {self._timeout:g}s")
                self._changed.wait(max(left, 0.05))
            if mine.done:
                return mine.result()
            self._leading = True
            self._queue.remove(queued)
            writes = [*self._queue[:self._max_group - 1], queued]  # the oldest first
            del self._queue[:self._max_group - 1]
        try:
            _commit(store, group, writes)
        finally:
            with self._changed:
                self._leading = False
                self._changed.notify_all()
        return mine.result()


def _commit(store: Store, group: AbstractContextManager[None],
            writes: list[_Write[object]]) -> None:
    """Every write in one transaction; if the transaction itself fails (busy past the
    bound, a full disk), every write of the group fails with it."""
    try:
        with group:
            for write in writes:
                write.run(store)
    except BaseException as exc:
        for write in writes:
            write.value, write.error = None, exc
        raise
    finally:
        for write in writes:
            write.done = True
