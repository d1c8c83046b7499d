"""Serving every inbox from one process: ``agentbox run --watch --all-users``.

Each inbox keeps its own lease, taken for one batch and released after it,
so several such processes (on one host, or on several with PostgreSQL) share
the inboxes between them: whoever holds an inbox's lease works it, and the
others pass on to the next inbox. Work goes round by round: in a round every
inbox with work gets at most one batch (up to its ``max_batch`` events), in a
shuffled order, so one inbox with a hundred thousand pending events cannot
starve a quiet one, and two processes seldom reach for the same inbox at
once. Between rounds the process sleeps until an inbox changes, a timer or a
retry falls due, or a lease it waits for ends.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentbox.clock import seconds_until
from agentbox.errors import AgentboxError
from agentbox.ledger.inboxes import Inboxes, InboxesWaiter
from agentbox.ledger.store import Store
from agentbox.rules.lease import new_holder_id, taken
from agentbox.stopping import Interrupted, Stop
from agentbox.worker import IDLE_FLOOR, LONGEST_SLEEP, RunReport, Worker

REST = 60.0  # seconds an inbox that cannot be served is left alone before another look
UPKEEP_EVERY = 3600.0  # seconds between two looks at an inbox's daily prune
# Inboxes looked at for a due prune in one quiet round: each look is a few reads, and
# new work waits while they are made (ten thousand inboxes would stall it for seconds).
UPKEEP_LOOKS = 20


@dataclass
class Pool:
    """Works every inbox of ``inboxes``, one batch per inbox per round."""

    inboxes: Inboxes
    #: The worker of one user's inbox, with that user's settings; raises AgentboxError
    #: when it cannot be served (no handler, say).
    worker_for: Callable[[str, Store], Worker]
    clock: Callable[[], int]
    emit: Callable[[str, RunReport], None]
    say: Callable[[str], None]
    stop: Stop = field(default_factory=Stop)
    holder: str = field(default_factory=new_holder_id)
    _workers: dict[str, Worker] = field(default_factory=dict, init=False)
    _later: dict[str, int] = field(default_factory=dict, init=False)     # user -> Unix time
    _resting: dict[str, float] = field(default_factory=dict, init=False)  # user -> monotonic
    _said: dict[str, str] = field(default_factory=dict, init=False)  # user -> last trouble
    _upkept: dict[str, float] = field(default_factory=dict, init=False)  # user -> monotonic

    def serve(self) -> None:
        """Work until stopped."""
        waiter = self.inboxes.waiter()
        look: set[str] | None = None  # None: every inbox there is
        try:
            while not self.stop.requested:
                worked = self._round(self._ready(look))
                upkeep_left = not worked and self._upkeep()
                # Inboxes that got a batch may have more, others may be due a prune;
                # those that changed meanwhile are looked at too, without sleeping.
                changed = self._changed(waiter,
                                        0.0 if worked or upkeep_left else self._delay())
                look = None if changed is None else changed | worked
        finally:
            waiter.close()

    def _ready(self, look: set[str] | None) -> list[str]:
        """The inboxes with work now, shuffled; the others' next look is noted."""
        now = self.clock()
        users = set(self.inboxes.users()) if look is None else set(look)
        users |= {user for user, at in self._later.items() if at <= now}
        rested = time.monotonic()
        for user, until in list(self._resting.items()):
            if until <= rested:
                del self._resting[user]
                users.add(user)
        users -= set(self._resting)
        for user in users:
            self._later.pop(user, None)
        due = self.inboxes.next_work(now, users)
        for user, why in self.inboxes.failures().items():
            self._rest(user, why)
        ready = [user for user, at in due.items() if at <= now]
        self._later.update({user: at for user, at in due.items() if at > now})
        random.shuffle(ready)
        return ready

    def _round(self, ready: list[str]) -> set[str]:
        """At most one batch in each ready inbox; the inboxes that had one."""
        worked: set[str] = set()
        for user in ready:
            if self.stop.requested:
                break
            try:
                worker = self._worker(user)
                # Another process may have emptied it since the round began: a run
                # would take and give back the lease for nothing.
                now = self.clock()
                due = worker.store.next_work(now)
                if due is None or due > now:
                    if due is not None:
                        self._later[user] = due
                    continue
                # Another process works it: look again when its lease ends (a release
                # before that is a change, and wakes this process sooner). Read first,
                # so a busy inbox costs no write lock.
                held = worker.store.lease()
                if held is not None and held.holder != self.holder and taken(held, now):
                    self._later[user] = held.until + 1
                    continue
                report = worker.run_once()
            except AgentboxError as exc:
                self._rest(user, str(exc))
                continue
            if report.outcome == "busy":  # taken between the look and the try
                self._later[user] = self.clock()
            elif report.outcome != "idle":
                self.emit(user, report)
            self._said.pop(user, None)
            if report.events:
                worked.add(user)
        return worked

    def _upkeep(self) -> bool:
        """At most one inbox's daily prune, and at most :data:`UPKEEP_LOOKS` looks, when
        a round found nothing to do; whether more may be due now (a prune ran, or looks
        remain: then the round after it looks on without sleeping first).

        Every inbox is looked at about hourly, quiet ones too (their done events
        age all the same); each prunes at most once a day.
        """
        now = time.monotonic()
        looks = 0
        for user in self.inboxes.users():
            if self._upkept.get(user, 0.0) > now or user in self._resting:
                continue
            if looks == UPKEEP_LOOKS:
                return True  # new work goes first; the next quiet round goes on
            looks += 1
            self._upkept[user] = now + UPKEEP_EVERY
            try:
                pruned = self._worker(user).prune_if_due()
            except AgentboxError as exc:
                self._rest(user, str(exc))
                return False
            if pruned is None:
                continue  # not due: a look costs a few reads
            if pruned.counts.total:
                self.say(f"{user}: {pruned.describe()}")
            return True  # one prune per quiet round: the other inboxes wait less
        return False

    def _worker(self, user: str) -> Worker:
        worker = self._workers.get(user)
        if worker is None:
            worker = self.worker_for(user, self.inboxes.store(user))
            worker.holder, worker.stop = self.holder, self.stop
            self._workers[user] = worker
        return worker

    def _rest(self, user: str, why: str) -> None:
        """Leave an inbox that cannot be served alone for a while, saying why once."""
        if self._said.get(user) != why:
            self._said[user] = why
            self.say(f"{user}: {why}; looking again every {REST:.0f}s")
        self._resting[user] = time.monotonic() + REST
        self._workers.pop(user, None)  # its settings are read afresh next time

    def _delay(self) -> float:
        delay = LONGEST_SLEEP
        if self._later:
            delay = min(delay, seconds_until(min(self._later.values())))
        if self._resting:
            delay = min(delay, min(self._resting.values()) - time.monotonic())
        return max(delay, IDLE_FLOOR)

    def _changed(self, waiter: InboxesWaiter, timeout: float) -> set[str] | None:
        with contextlib.suppress(Interrupted), self.stop.interruptible():
            return waiter.wait(timeout)
        return set()
