"""Runs of the agent over one inbox: one run, or watching until stopped.

This is the orchestration behind ``agentbox run``, kept free of the CLI so
that the scenario runner, the all-users pool and the tests drive the same
code. The guarantees stay in the store: the handler runs outside any
transaction, the lease is renewed about every third of its TTL while the
handler works (and the handler stopped when it cannot be), and everything the
handler answered is written in the one fenced finish transaction, or not at
all.

A watching worker (:meth:`Worker.watch`) holds its inbox's lease for as long
as it watches, renewing it every third of the TTL, so a second watcher on the
same inbox is a standby: it sleeps until the lease ends (released on a clean
stop, expired when the first died or stalled) and takes over with a new
generation, which fences the first out of everything it might still try.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentbox.clock import seconds_until
from agentbox.errors import AgentboxError, BadInput, Exit, NotAsAsked
from agentbox.jsonutil import stored_value
from agentbox.ledger.store import Store
from agentbox.process import CommandNotStarted, run_child
from agentbox.rules.answer import Answer, check_channels, parse
from agentbox.rules.breaker import Pause
from agentbox.rules.lease import new_holder_id, taken
from agentbox.rules.policy import Policy
from agentbox.rules.records import DEFAULT_CHANNEL, Event
from agentbox.rules.state import INITIAL, Version
from agentbox.spelling import describe_pause, pause_document
from agentbox.stopping import Interrupted, Stop

if TYPE_CHECKING:
    from datetime import tzinfo

    from agentbox.ledger.engine import Waiter
    from agentbox.ledger.runs import Claimed
    from agentbox.upkeep import PruneReport

MAX_RUNS = 1000  # --until-empty stops here even if work keeps arriving
PREVIEW = 120  # bytes of a rejected answer quoted in its error, to show what went wrong
MIN_HEARTBEAT = 0.2  # seconds; a very short lease_ttl still renews sanely
LONGEST_SLEEP = 300.0  # a watcher looks again at least this often, whatever it waits for
IDLE_FLOOR = 0.05  # a pass that found nothing to do never sleeps less than this

# outcome -> exit code of a one-shot run; an interrupted run exits 128 + the signal
EXIT_CODES: dict[str, int] = {
    "idle": Exit.OK,          # nothing to claim
    "done": Exit.OK,          # the handler answered and the finish was recorded
    "failed": Exit.FAILURE,   # handler error, bad answer or timeout: recorded, will retry
    "busy": Exit.TEMPFAIL,    # another worker holds the lease
    "lost": Exit.TEMPFAIL,    # the lease lapsed while the handler ran; handler stopped
    "refused": Exit.TEMPFAIL,  # the fence refused the finish; nothing recorded
    "paused": Exit.OK,        # the inbox is paused (breaker or budget): nothing claimed
    "deferred": Exit.TEMPFAIL,  # the handler exited 75: attempts given back, retry later
}


@dataclass(frozen=True)
class EventAfter:
    """One event of a failed run as the failure left it, read back from the store."""

    id: int
    status: str  # "pending" (it will retry) or "dead"
    attempts: int
    retry_at: int | None  # a retry held back by the backoff starts then; None: at once

    def document(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "attempts": self.attempts,
                "retry_at": self.retry_at}


def _fates(after: Sequence[EventAfter], max_attempts: int | None) -> str:
    """What became of each event, events that share a fate named together."""
    from agentbox.spelling import when

    groups: dict[tuple[str, int, int | None], list[int]] = {}
    for event in after:
        groups.setdefault((event.status, event.attempts, event.retry_at), []).append(event.id)
    said = []
    for (status, attempts, retry_at), ids in groups.items():
        who = f"event {ids[0]}" if len(ids) == 1 else f"events {', '.join(map(str, ids))}"
        many = len(ids) > 1
        if status == "dead":
            said.append(f"{who} {'are' if many else 'is'} dead after {attempts} of "
                        f"{max_attempts} attempts")
        elif status == "pending":
            later = f", not before {when(retry_at)}" if retry_at is not None else ""
            said.append(f"{who} will retry (attempt {attempts} of {max_attempts} failed)"
                        f"{later}")
        else:
            said.append(f"{who} {'are' if many else 'is'} {status}")
    return "; ".join(said)


def _retry(after: Sequence[EventAfter]) -> str:
    from agentbox.spelling import when

    times = [e.retry_at for e in after if e.retry_at is not None]
    return f" until {when(min(times))}" if times else ""


@dataclass(frozen=True)
class RunReport:
    """What one run did, for a line of output or a JSON document."""

    outcome: str
    exit_code: int
    generation: int | None = None
    events: tuple[int, ...] = ()
    timers_fired: int = 0
    messages: int = 0
    approvals: int = 0
    timers: int = 0
    error: str | None = None
    events_after: tuple[EventAfter, ...] = ()  # a failed run: what became of each event
    max_attempts: int | None = None
    paused: Pause | None = None  # the pause that kept the run from claiming

    def document(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "exit_code": self.exit_code,
                "generation": self.generation, "events": list(self.events),
                "timers_fired": self.timers_fired, "messages": self.messages,
                "approvals": self.approvals, "timers": self.timers, "error": self.error,
                "events_after": [e.document() for e in self.events_after],
                "max_attempts": self.max_attempts, "paused": pause_document(self.paused)}

    def describe(self) -> str:
        """One line for people: generation, events, outcome."""
        gen = f"generation {self.generation}: " if self.generation is not None else ""
        fired = f" ({self.timers_fired} timer(s) fired)" if self.timers_fired else ""
        ids = f"{len(self.events)} event(s) ({', '.join(map(str, self.events))})"
        text = {
            "idle": "nothing to do",
            "done": f"{ids} done; queued {self.messages} message(s), "
                    f"{self.approvals} approval request(s), {self.timers} timer(s)",
            "failed": (_fates(self.events_after, self.max_attempts) if self.events_after
                       else f"{ids} failed and will retry or go dead"),
            "busy": "the lease is held by another worker; nothing claimed",
            "lost": f"lease lost while the handler ran; {ids} left for the next worker",
            "refused": f"finish refused by the lease fence; {ids} left to the current holder",
            "paused": describe_pause(self.paused),
            "deferred": f"{ids} deferred{_retry(self.events_after)}: the handler exited 75 "
                        "(a temporary failure), the attempts given back",
        }.get(self.outcome, self.error or f"{self.outcome}; {ids} not done")
        return f"{gen}{text}{fired}"


def check_command(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Check that the handler can be started, before anything is claimed."""
    program = argv[0]
    if os.sep in program:
        if not os.path.isfile(program):
            raise CommandNotStarted(f"handler {program!r} not found")
        if not os.access(program, os.X_OK):
            raise CommandNotStarted(f"handler {program!r} is not executable")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise CommandNotStarted(f"handler {program!r} not found on PATH")


@dataclass(frozen=True)
class Batch:
    """One run's claim, as its handler is given it."""

    user: str
    db: str
    generation: int
    keys: Mapping[int, str]  # each event's idempotency key, by id (Core.event_keys)
    events: tuple[Event, ...]
    holder: str = ""
    state: Version = INITIAL

    def document(self) -> bytes:
        """The handler's stdin: {"user", "generation", "events": [...], "state",
        "state_version"}."""
        doc = {"user": self.user, "generation": self.generation, "events": [
            {"id": e.id, "source": e.source, "source_id": e.source_id,
             "payload": stored_value(e.payload), "attempt": e.attempts,
             "idempotency_key": self.keys[e.id]} for e in self.events],
            "state": self.state.value(), "state_version": self.state.version}
        return json.dumps(doc, ensure_ascii=False).encode("utf-8")

    def env(self) -> dict[str, str]:
        """What the handler's environment adds to agentbox's own; ``AGENTBOX_RUN`` names
        the run for ``agentbox step`` (see :func:`agentbox.steprun.current_run`)."""
        from agentbox.steprun import run_env

        return {"AGENTBOX_USER": self.user, "AGENTBOX_DB": self.db,
                "AGENTBOX_GENERATION": str(self.generation),
                "AGENTBOX_RUN": run_env(self.db, self.user, self.holder, self.generation)}


@dataclass(frozen=True)
class Handled:
    """What a handler made of a batch: an answer, an error, or nothing (the lease was lost)."""

    answer: Answer | None = None
    error: str | None = None
    lost: bool = False
    killed: bool = False  # the handler was SIGKILLed on purpose (a rehearsal's fault)
    tempfail: bool = False  # the handler exited 75: not the events' fault


class Handler(Protocol):
    """Turns a batch into :class:`Handled`: a command, or a scenario's scripted answer."""

    def check(self) -> None:
        """Raise :class:`CommandNotStarted` when the handler cannot be started."""

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Handled:
        """Work the batch, calling ``heartbeat`` every ``every`` seconds while at it;
        stop and report the lease lost when it returns False."""


@dataclass(frozen=True)
class CommandHandler:
    """The user's command: the batch on stdin, the answer on stdout, no shell."""

    argv: Sequence[str]
    timeout: int
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    kill_after: float | None = None  # SIGKILL it then: a fault a rehearsal injects
    channels: Collection[str] = (DEFAULT_CHANNEL,)  # a message naming another is malformed

    def check(self) -> None:
        check_command(self.argv, self.env)

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Handled:
        try:
            result = run_child(self.argv, batch.document(), {**self.env, **batch.env()},
                               self.timeout, heartbeat=heartbeat, heartbeat_every=every,
                               kill_after=self.kill_after)
        except CommandNotStarted as exc:
            return Handled(error=str(exc))
        if result.stopped:  # only a failed heartbeat stops the child
            return Handled(lost=True)
        if not result.ok:
            return Handled(error=f"handler {result.describe()}", killed=result.killed,
                           tempfail=result.returncode == Exit.TEMPFAIL)
        tail = result.stderr_tail.strip()
        try:
            if result.stdout_truncated:
                raise BadInput(f"handler output is larger than {len(result.stdout)} bytes")
            answer = parse(result.stdout)
            check_channels(answer, self.channels)
            return Handled(answer=answer)
        except BadInput as exc:
            return Handled(error=f"handler output rejected: {exc}; it began "
                           + repr(result.stdout[:PREVIEW].decode("utf-8", "replace"))
                           + (f"; stderr: {tail}" if tail else ""))


@dataclass
class Worker:
    """Runs a handler over one user's inbox; one holder id per process."""

    store: Store
    policy: Policy
    handler: Handler
    user: str
    db: str
    clock: Callable[[], int]
    holder: str = field(default_factory=new_holder_id)
    stop: Stop = field(default_factory=Stop)
    zone: tzinfo | None = None  # the inbox's time zone: its local day bounds the budgets
    _renew_at: float = field(default=0.0, init=False, repr=False)  # monotonic
    _standing_by: tuple[str, int] | None = field(default=None, init=False, repr=False)

    @property
    def renew_every(self) -> float:
        return max(MIN_HEARTBEAT, self.policy.lease_ttl / 3)

    # -- one run ---------------------------------------------------------------

    def run_once(self) -> RunReport:
        """Tick, acquire, claim, run the handler, finish or fail, release."""
        self.handler.check()
        fired = self.store.tick(self.clock(), self.policy)
        if self.stop.requested:
            return self._interrupted(None, [], fired)
        generation = self.store.acquire(self.holder, self.clock(), self.policy.lease_ttl)
        if generation is None:
            return RunReport("busy", EXIT_CODES["busy"], timers_fired=fired,
                             error=self._busy_error())
        try:
            return self.work(generation, fired)
        finally:
            with contextlib.suppress(AgentboxError):
                self.store.release(self.holder, generation, self.clock())

    def work(self, generation: int, fired: int | None = None) -> RunReport:
        """Claim one batch under a lease this worker holds, run the handler, record it;
        nothing while the inbox is paused.

        ``fired``: the timers a scheduler pass fired before the lease was taken (a
        one-shot run makes it first, so that a run kept out by the lease still fires
        them); None: the pass is made here, with the claim (:meth:`Store.take`).
        """
        now = self.clock()
        if fired is None:
            fired, paused, events = self.store.take(self.holder, generation, now,
                                                    self._day(now), self.policy)
        else:
            paused = self.store.gate(now, self._day(now), self.policy)
            events = None
            if paused is None:
                events = self.store.claim(self.holder, generation, self.clock(), self.policy)
        if paused is not None:
            return RunReport("paused", EXIT_CODES["paused"], generation, timers_fired=fired,
                             paused=paused)
        if events is None:
            return RunReport("lost", EXIT_CODES["lost"], generation, timers_fired=fired,
                             error=f"lease lost before claiming (generation {generation})")
        # An empty claim is idle even when a stop came meanwhile: nothing was claimed,
        # so there is nothing to give back and no interrupted run to report.
        if not events:
            return RunReport("idle", EXIT_CODES["idle"], generation, timers_fired=fired)
        if self.stop.requested:
            return self._interrupted(generation, [e.id for e in events], fired)
        return self._handle(generation, events, fired)

    def _day(self, now: int) -> tuple[int, int]:
        """The local day the budgets count (see :meth:`Store.gate`), read in :attr:`zone`
        (UTC without one) only when there is a budget to check."""
        from agentbox.rules.breaker import budgeted

        if not budgeted(self.policy):
            return (now, now)
        from datetime import UTC

        from agentbox.calendar import local_day

        return local_day(now, self.zone or UTC)

    def _busy_error(self) -> str:
        held = self.store.lease()
        if held is None:
            return "the lease is held by another worker; try again later"
        from agentbox.spelling import when

        return (f"the lease is held by another worker ({held.holder}, generation "
                f"{held.generation}, until {when(held.until)}); try again later")

    def _renew(self, generation: int) -> bool:
        """Renew the lease; False when it cannot be kept (or proven kept)."""
        try:
            renewed = self.store.renew(self.holder, generation, self.clock(),
                                       self.policy.lease_ttl)
        except AgentboxError:
            return False  # cannot prove we still hold it: stop rather than race
        if renewed:
            self._renew_at = time.monotonic() + self.renew_every
        return renewed

    def _handle(self, generation: int, events: Claimed, fired: int) -> RunReport:
        ids = [e.id for e in events]
        batch = Batch(self.user, self.db, generation, events.keys, tuple(events),
                      self.holder, events.state)
        try:
            with self.stop.interruptible():
                outcome = self.handler.handle(batch, lambda: self._renew(generation),
                                              self.renew_every)
        except Interrupted:  # the handler's whole group was stopped on the way out
            return self._interrupted(generation, ids, fired)
        # A stop that came after the handler ended waits for its outcome to be recorded:
        # giving back finished work would only have it done twice.
        if outcome.lost:
            return RunReport("lost", EXIT_CODES["lost"], generation, tuple(ids), fired,
                             error=f"lease lost while the handler ran (generation "
                                   f"{generation}); the handler was stopped and nothing "
                                   "was recorded")
        if outcome.error is not None:
            return self._fail(generation, ids, fired, outcome.error,
                              "deferred" if outcome.tempfail else "failed")
        return self._finish(generation, ids, fired, outcome.answer or Answer())

    def _finish(self, generation: int, ids: list[int], fired: int,
                answer: Answer) -> RunReport:
        try:
            recorded = self.store.finish(self.holder, generation, self.clock(), ids, answer,
                                         self.policy)
        except (BadInput, NotAsAsked) as exc:
            return self._fail(generation, ids, fired,
                              f"handler answer could not be applied: {exc}")
        if not recorded:
            return self._refused(generation, ids, fired)
        return RunReport("done", EXIT_CODES["done"], generation, tuple(ids), fired,
                         len(answer.messages), len(answer.approvals), len(answer.timers))

    def _fail(self, generation: int, ids: list[int], fired: int, error: str,
              outcome: str = "failed") -> RunReport:
        """A handler error (``failed``) or its exit 75 (``deferred``), recorded as such."""
        now = self.clock()
        record = self.store.defer if outcome == "deferred" else self.store.fail
        if not record(self.holder, generation, now, ids, error, self.policy):
            return self._refused(generation, ids, fired)
        return RunReport(outcome, EXIT_CODES[outcome], generation, tuple(ids), fired,
                         error=error, events_after=self._after(ids, now),
                         max_attempts=self.policy.max_attempts)

    def _after(self, ids: list[int], now: int) -> tuple[EventAfter, ...]:
        """The failed events as they stand now; nothing if they cannot be read (the
        failure itself is recorded either way)."""
        try:
            events = [self.store.event(i) for i in ids]
        except AgentboxError:
            return ()
        return tuple(EventAfter(e.id, e.status, e.attempts,
                                e.available_at if e.status == "pending" and e.available_at > now
                                else None)
                     for e in events if e is not None)

    def _refused(self, generation: int, ids: list[int], fired: int) -> RunReport:
        return RunReport("refused", EXIT_CODES["refused"], generation, tuple(ids), fired,
                         error=f"finish refused: this worker no longer holds the lease "
                               f"(generation {generation}); nothing was recorded and the "
                               "events are left to the current holder")

    def _interrupted(self, generation: int | None, ids: list[int], fired: int) -> RunReport:
        """Stop cleanly: the claimed events go back to pending with their attempt given back."""
        given = False
        if generation is not None and ids:
            with contextlib.suppress(AgentboxError):
                given = self.store.interrupt(self.holder, generation, self.clock(), ids)
        what = f"{len(ids)} event(s) ({', '.join(map(str, ids))})"
        if not ids:
            then = "nothing was claimed"
        elif given:
            then = f"the handler was stopped; {what} back to pending, the attempt given back"
        else:
            then = (f"the handler was stopped; {what} left for the next worker (the lease "
                    "had moved on)")
        sig = self.stop.signum or signal.SIGTERM
        return RunReport("interrupted", 128 + sig, generation, tuple(ids), fired,
                         error=f"run interrupted by {self.stop.name}; {then}")

    def prune_if_due(self) -> PruneReport | None:
        """The inbox's daily prune, a bounded share of it (see upkeep.auto_prune);
        None when none is due or a stop was asked for."""
        from agentbox.upkeep import auto_prune

        if self.stop.requested:
            return None
        return auto_prune(self.store, self.clock(), self.policy)

    # -- watching --------------------------------------------------------------

    def watch(self, emit: Callable[[RunReport], None], say: Callable[[str], None]) -> None:
        """Run until stopped: work as soon as there is work, sleep otherwise.

        ``emit`` gets every run that did something, ``say`` what changes about
        the lease. Returns after a stop (the lease released); raises
        :class:`CommandNotStarted` when the handler cannot be started, before
        anything is claimed.
        """
        self.handler.check()
        waiter = self.store.waiter()
        held: int | None = None
        said_pause: Pause | None = None  # a pause is said once, not on every look
        try:
            while not self.stop.requested:
                if held is None:
                    held = self._take(waiter, say)
                    continue
                if time.monotonic() >= self._renew_at and not self._renew(held):
                    say(f"lease lost while watching (generation {held}); standing by")
                    held = None
                    continue
                self.handler.check()
                report = self.work(held)
                if report.outcome == "paused":
                    if report.paused != said_pause:
                        emit(report)
                    said_pause = report.paused
                elif report.outcome != "idle":
                    emit(report)
                if report.outcome in ("lost", "refused"):
                    held = None
                elif report.outcome in ("idle", "paused"):
                    self._prune(say)
                    due = self.store.next_work(self.clock())
                    self._sleep(waiter, due, self._renew_at)
        finally:
            waiter.close()
            if held is not None:
                with contextlib.suppress(AgentboxError):
                    self.store.release(self.holder, held, self.clock())

    def _prune(self, say: Callable[[str], None]) -> None:
        """A watcher's daily prune, when it has nothing else to do; said, never fatal."""
        try:
            pruned = self.prune_if_due()
        except AgentboxError as exc:
            say(f"prune skipped: {exc}")
            return
        if pruned is not None and pruned.counts.total:
            say(pruned.describe())

    def _take(self, waiter: Waiter, say: Callable[[str], None]) -> int | None:
        """Take the lease if it is free, else sleep until it may be (a standby)."""
        lease = self.store.lease()
        now = self.clock()
        if lease is not None and lease.holder != self.holder and taken(lease, now):
            if self._standing_by != (lease.holder, lease.generation):
                self._standing_by = (lease.holder, lease.generation)
                say(f"standing by: {lease.holder} holds the lease (generation "
                    f"{lease.generation})")
            self._sleep(waiter, lease.until + 1)
            return None
        generation = self.store.acquire(self.holder, now, self.policy.lease_ttl)
        if generation is not None:
            self._renew_at = time.monotonic() + self.renew_every
            self._standing_by = None
            say(f"watching with the lease (generation {generation})")
        return generation

    def _sleep(self, waiter: Waiter, due: int | None, renew_at: float | None = None) -> None:
        """Sleep until ``due`` (Unix seconds), ``renew_at`` (monotonic), a change, or a stop."""
        delay = LONGEST_SLEEP
        if due is not None:
            delay = min(delay, seconds_until(due))
        if renew_at is not None:
            delay = min(delay, renew_at - time.monotonic())
        with contextlib.suppress(Interrupted), self.stop.interruptible():
            waiter.wait(max(delay, IDLE_FLOOR))


def run_until_empty(worker: Worker, limit: int = MAX_RUNS) -> list[RunReport]:
    """Runs until one finds nothing to do (or the inbox paused), one does not exit 0, or
    ``limit`` runs."""
    reports: list[RunReport] = []
    while len(reports) < limit and not worker.stop.requested:
        report = worker.run_once()
        reports.append(report)
        if report.exit_code != 0 or report.outcome in ("idle", "paused"):
            break
    return reports
