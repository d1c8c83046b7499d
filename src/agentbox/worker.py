"""One run of the agent: scheduler pass, lease, claim, handler, finish, release.

This is the orchestration behind ``agentbox run``, kept free of the CLI so
tests and other front ends drive the same code. The guarantees stay in the
store: the handler runs outside any transaction, the lease is renewed about
every third of its TTL while the handler works (and the handler stopped when
it cannot be), and everything the handler answered is written in the one
fenced finish transaction, or not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentbox.errors import AgentboxError, BadInput, Exit, NotAsAsked
from agentbox.process import CommandNotStarted, run_child
from agentbox.rules.answer import Answer, parse
from agentbox.rules.lease import new_holder_id
from agentbox.rules.policy import Policy
from agentbox.rules.records import Event
from agentbox.store import Store

MAX_RUNS = 1000  # --until-empty stops here even if work keeps arriving
MIN_HEARTBEAT = 0.2  # seconds; a very short lease_ttl still renews sanely

# outcome -> exit code
EXIT_CODES: dict[str, int] = {
    "idle": Exit.OK,          # nothing to claim
    "done": Exit.OK,          # the handler answered and the finish was recorded
    "failed": Exit.FAILURE,   # handler error, bad answer or timeout: recorded, will retry
    "busy": Exit.TEMPFAIL,    # another worker holds the lease
    "lost": Exit.TEMPFAIL,    # the lease lapsed while the handler ran; handler stopped
    "refused": Exit.TEMPFAIL,  # the fence refused the finish; nothing recorded
}


class Interrupted(BaseException):
    """SIGTERM or SIGINT reached the run while its handler was working."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


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
    from agentbox.render import when

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

    def document(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "exit_code": self.exit_code,
                "generation": self.generation, "events": list(self.events),
                "timers_fired": self.timers_fired, "messages": self.messages,
                "approvals": self.approvals, "timers": self.timers, "error": self.error,
                "events_after": [e.document() for e in self.events_after],
                "max_attempts": self.max_attempts}

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
        }.get(self.outcome, f"{self.outcome}; {ids} not done")
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


def idempotency_key(instance: str, event_id: int) -> str:
    """Stable for an event across retries and replays, unique across inboxes."""
    return f"{instance}-event-{event_id}"


@dataclass
class Worker:
    """Runs a handler over one user's inbox; one holder id per process."""

    store: Store
    policy: Policy
    argv: Sequence[str]
    user: str
    db: str
    clock: Callable[[], int]
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    holder: str = field(default_factory=new_holder_id)
    _signalled: int | None = field(default=None, init=False)
    _raise_on_signal: bool = field(default=False, init=False)

    # -- signals ---------------------------------------------------------------

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """Turn SIGTERM/SIGINT into a clean stop: handler group stopped, nothing done.

        Outside the handler's lifetime a signal is only noted and acted on at
        the next safe point, so no transaction is ever cut in half by it.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, _frame: object) -> None:
            self._signalled = signum
            if self._raise_on_signal:
                self._raise_on_signal = False
                raise Interrupted(signum)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def signalled(self) -> int | None:
        return self._signalled

    # -- one run ---------------------------------------------------------------

    def run_once(self) -> RunReport:
        """Tick, acquire, claim, run the handler, finish or fail, release."""
        check_command(self.argv, self.env)
        fired = self.store.tick(self.clock(), self.policy)
        if self._signalled is not None:
            return self._interrupted(None, [], fired)
        generation = self.store.acquire(self.holder, self.clock(), self.policy.lease_ttl)
        if generation is None:
            return RunReport("busy", EXIT_CODES["busy"], timers_fired=fired,
                             error=self._busy_error())
        try:
            events = self.store.claim(self.holder, generation, self.clock(), self.policy)
            if events is None:
                return RunReport("lost", EXIT_CODES["lost"], generation, timers_fired=fired,
                                 error=f"lease lost before claiming (generation {generation})")
            if self._signalled is not None:
                return self._interrupted(generation, [e.id for e in events], fired)
            if not events:
                return RunReport("idle", EXIT_CODES["idle"], generation, timers_fired=fired)
            return self._handle(generation, events, fired)
        finally:
            with contextlib.suppress(AgentboxError):
                self.store.release(self.holder, generation, self.clock())

    def _busy_error(self) -> str:
        held = self.store.lease()
        if held is None:
            return "the lease is held by another worker; try again later"
        from agentbox.render import when

        return (f"the lease is held by another worker ({held.holder}, generation "
                f"{held.generation}, until {when(held.until)}); try again later")

    def _batch(self, generation: int, events: list[Event]) -> bytes:
        instance = self.store.instance_id()
        doc = {"user": self.user, "generation": generation, "events": [
            {"id": e.id, "source": e.source, "source_id": e.source_id,
             "payload": json.loads(e.payload), "attempt": e.attempts,
             "idempotency_key": idempotency_key(instance, e.id)} for e in events]}
        return json.dumps(doc, ensure_ascii=False).encode("utf-8")

    def _handle(self, generation: int, events: list[Event], fired: int) -> RunReport:
        ids = [e.id for e in events]
        ttl = self.policy.lease_ttl

        def heartbeat() -> bool:
            """Renew the lease; False (the child is stopped) when it cannot be kept."""
            try:
                return self.store.renew(self.holder, generation, self.clock(), ttl)
            except AgentboxError:
                return False  # cannot prove we still hold it: stop rather than race

        env = {**self.env, "AGENTBOX_USER": self.user, "AGENTBOX_DB": self.db,
               "AGENTBOX_GENERATION": str(generation)}
        stdin = self._batch(generation, events)
        try:
            self._raise_on_signal = True
            if self._signalled is not None:
                raise Interrupted(self._signalled)
            try:
                result = run_child(self.argv, stdin, env, self.policy.handler_timeout,
                                   heartbeat=heartbeat,
                                   heartbeat_every=max(MIN_HEARTBEAT, ttl / 3))
            finally:
                self._raise_on_signal = False
        except Interrupted as stop:  # run_child stopped the handler's group on its way out
            return self._interrupted(generation, ids, fired, stop.signum)
        except CommandNotStarted as exc:
            return self._fail(generation, ids, fired, str(exc))
        if self._signalled is not None:
            return self._interrupted(generation, ids, fired)
        if result.stopped:  # only a failed heartbeat stops the child
            return RunReport("lost", EXIT_CODES["lost"], generation, tuple(ids), fired,
                             error=f"lease lost while the handler ran (generation "
                                   f"{generation}); the handler was stopped and nothing "
                                   "was recorded")
        if not result.ok:
            return self._fail(generation, ids, fired, f"handler {result.describe()}")
        tail = result.stderr_tail.strip()
        try:
            if result.stdout_truncated:
                raise BadInput(f"handler output is larger than {len(result.stdout)} bytes")
            answer = parse(result.stdout)
        except BadInput as exc:
            return self._fail(generation, ids, fired, f"handler output rejected: {exc}"
                              + (f"; stderr: {tail}" if tail else ""))
        return self._finish(generation, ids, fired, answer)

    def _finish(self, generation: int, ids: list[int], fired: int,
                answer: Answer) -> RunReport:
        try:
            recorded = self.store.finish(self.holder, generation, self.clock(), ids, answer)
        except (BadInput, NotAsAsked) as exc:
            return self._fail(generation, ids, fired,
                              f"handler answer could not be applied: {exc}")
        if not recorded:
            return self._refused(generation, ids, fired)
        return RunReport("done", EXIT_CODES["done"], generation, tuple(ids), fired,
                         len(answer.messages), len(answer.approvals), len(answer.timers))

    def _fail(self, generation: int, ids: list[int], fired: int, error: str) -> RunReport:
        now = self.clock()
        if not self.store.fail(self.holder, generation, now, ids, error, self.policy):
            return self._refused(generation, ids, fired)
        return RunReport("failed", EXIT_CODES["failed"], generation, tuple(ids), fired,
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

    def _interrupted(self, generation: int | None, ids: list[int], fired: int,
                     signum: int | None = None) -> RunReport:
        """Stop cleanly: the claimed events are failed (not done), the lease released."""
        sig = signum or self._signalled or signal.SIGTERM
        name = signal.Signals(sig).name
        error = f"run interrupted by {name}; the handler was stopped"
        if generation is not None and ids:
            with contextlib.suppress(AgentboxError):
                self.store.fail(self.holder, generation, self.clock(), ids, error, self.policy)
        return RunReport("interrupted", 128 + sig, generation, tuple(ids), fired, error=error)


def run_until_empty(worker: Worker, limit: int = MAX_RUNS) -> list[RunReport]:
    """Runs until one finds nothing to do, one does not exit 0, or ``limit`` runs."""
    reports: list[RunReport] = []
    while len(reports) < limit and worker.signalled is None:
        report = worker.run_once()
        reports.append(report)
        if report.exit_code != 0 or report.outcome == "idle":
            break
    return reports
