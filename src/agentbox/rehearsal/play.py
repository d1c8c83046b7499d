"""Playing recorded traffic into a scratch inbox on a simulated clock.

The clock starts at the first recorded thing and moves from one moment of
work to the next: an arrival or an approval answer falls due, a timer or a
retry comes due, or the outbox's gap ends. At each moment the recorded things
due are delivered through the store, then a run is made while there is work
and the outbox is dispatched while it may send, by the very
:class:`~agentbox.worker.Worker` and :class:`~agentbox.dispatcher.Dispatcher`
that ``run --watch`` and ``dispatch --watch`` use, as those watchers would.
The handler is the user's command run for real, as a process, with
``AGENTBOX_NOW`` set to the simulated time; the sender records what it is
given. The clock stops at the end of the recorded window.

Faults (see :mod:`agentbox.rehearsal.faults`) are injected where they would
strike live: a killed run's handler is SIGKILLed and its worker records
nothing, a stalled run's handler finishes but its finish comes after its
lease ended; either way the clock jumps past the lease and a standby worker
takes over with a new generation, as a second watcher would. A kill may also
land inside a journaled step: the rehearsal hands the handler a step log
(:class:`StepLog`) in which every step try notes its key, so it sees which
steps each run began and which try its kill struck.
"""

from __future__ import annotations

import heapq
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentbox.dispatcher import Dispatcher, Planned
from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rehearsal.faults import Faults
from agentbox.rehearsal.traffic import Arrival, Recording
from agentbox.rules.outbox import Dispatch, Wait
from agentbox.rules.policy import Policy
from agentbox.rules.records import DEFAULT_CHANNEL, Answered, SendOutcome
from agentbox.steprun import REHEARSAL_VARIABLE
from agentbox.worker import Batch, CommandHandler, Handled, RunReport, Worker, check_command

MAX_RUNS_AT_ONCE = 1000  # runs at one moment before the clock moves on regardless


class RunKilled(Exception):
    """The fault injector killed a run: its worker died and records nothing."""


@dataclass(frozen=True)
class Run:
    """One run the rehearsal made: when, which events, and how it ended (done, failed,
    killed, stalled, refused, lost)."""

    n: int
    at: int
    generation: int | None
    events: tuple[int, ...]
    outcome: str
    error: str | None = None


@dataclass(frozen=True)
class Send:
    """What the recording sender was given."""

    at: int
    channel: str
    body: str
    urgent: bool
    key: str
    attempt: int
    message_ids: tuple[int, ...]


@dataclass
class Played:
    """Everything a rehearsal saw, for its report."""

    runs: list[Run] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)
    delivered: int = 0
    duplicates: int = 0  # deliveries the duplicate fault added
    refused: list[tuple[Arrival, str]] = field(default_factory=list)  # arrival, why
    answers: dict[str, int] = field(default_factory=dict)  # outcome that stood -> count
    timers_fired: int = 0
    step_tries: list[str] = field(default_factory=list)  # each step try begun, by key
    end: int = 0


@dataclass(frozen=True)
class RecordingSender:
    """The sender of a rehearsal: it keeps what it is given and says it was sent."""

    played: Played
    clock: Callable[[], int]
    channel: str = DEFAULT_CHANNEL

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        self.played.sends.append(Send(self.clock(), self.channel, dispatch.body,
                                      dispatch.urgent, dispatch.key, dispatch.tries,
                                      dispatch.message_ids))
        return "sent", None


@dataclass(frozen=True)
class StepLog:
    """The file each step try of a run notes its key in (see :mod:`agentbox.steprun`),
    emptied before every run."""

    path: Path

    def start(self, kill_step: int | None) -> str:
        """Empty the log for a run; ``AGENTBOX_REHEARSAL`` for its handler."""
        self.path.write_bytes(b"")
        return json.dumps({"steps": str(self.path), "kill_step": kill_step})

    def tries(self) -> list[str]:
        """The keys of the step tries the run began, in order."""
        return [str(json.loads(line)) for line in self.path.read_bytes().splitlines()]


@dataclass
class RehearsedHandler:
    """The user's command, run for real at the simulated time, with the run's fault."""

    rehearsal: Rehearsal
    argv: Sequence[str]
    timeout: int
    env: Mapping[str, str]

    def check(self) -> None:
        check_command(self.argv, self.env)

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Handled:
        r = self.rehearsal
        fault = r.faults.for_run() if r.faults is not None else None
        kill_step = fault.step if fault is not None else None
        env = {**self.env, "AGENTBOX_NOW": str(r.now),
               REHEARSAL_VARIABLE: r.steps.start(kill_step)}
        kill_after = fault.after if fault is not None and fault.kind == "kill" else None
        began = time.monotonic()
        handled = CommandHandler(self.argv, self.timeout, env, kill_after,
                                 [plan.name for plan in r.channels]).handle(
            batch, heartbeat, every)
        tried = r.steps.tries()
        r.played.step_tries.extend(tried)
        if kill_step is not None and len(tried) >= kill_step:
            r.lapse(batch, "killed", f"inside step {tried[kill_step - 1]!r}")
            raise RunKilled
        if handled.killed:
            r.lapse(batch, "killed")
            raise RunKilled
        if r.faults is not None:
            r.faults.ran(time.monotonic() - began, len(tried))
        if fault is not None and fault.kind == "stall":
            r.lapse(batch, "stalled")
            r.take_over()
        return handled


class Rehearsal:
    """One rehearsal: its scratch store, the traffic, the handler, the faults."""

    def __init__(self, store: Store, policy: Policy, traffic: Recording, argv: Sequence[str],
                 user: str, folder: Path, faults: Faults | None = None,
                 env: Mapping[str, str] | None = None,
                 channels: Sequence[Planned] = ()) -> None:
        self.store = store
        self.steps = StepLog(folder / "steps.jsonl")
        self.policy = policy
        self.traffic = traffic
        self.faults = faults
        self.user = user
        self.played = Played(end=traffic.end)
        self.handler = RehearsedHandler(self, argv, policy.handler_timeout,
                                        dict(os.environ if env is None else env))
        self._inputs: list[tuple[int, int, int, Arrival | Answered]] = []
        for n, arrival in enumerate(traffic.arrivals):
            self._push(arrival.at, 0, n, arrival)
        for n, answer in enumerate(traffic.answers):
            self._push(answer.at, 1, n, answer)
        self._seq = len(self._inputs)
        times = [t for t, *_ in self._inputs]
        self.now = min(times) if times else traffic.end
        self.worker = self._new_worker()
        # one dispatcher per channel, each under its own gap, mode and quiet hours
        self.channels = tuple(channels) or (Planned(DEFAULT_CHANNEL, policy),)
        self.dispatchers = [
            Dispatcher(store, plan.policy,
                       RecordingSender(self.played, lambda: self.now, plan.name),
                       lambda: self.now, channel=plan.name, quiet=plan.quiet)
            for plan in self.channels]
        self._lapsed: dict[int, str] = {}  # a lapsed run's generation -> killed | stalled
        # the last lapsed run's claim, and where a kill struck it
        self._killed: tuple[int, tuple[int, ...], str] = (0, (), "")
        self._waits: list[Wait] = []  # why each channel's held messages wait

    def _push(self, at: int, rank: int, n: int, item: Arrival | Answered) -> None:
        heapq.heappush(self._inputs, (at, rank, n, item))

    def _new_worker(self) -> Worker:
        return Worker(self.store, self.policy, self.handler, user=self.user,
                      db=self.store.location, clock=lambda: self.now)

    # -- faults ------------------------------------------------------------------

    def lapse(self, batch: Batch, how: str, where: str = "") -> None:
        """The run of ``batch`` outlives its lease: the clock jumps past the lease's end."""
        self._lapsed[batch.generation] = how
        self._killed = (batch.generation, tuple(e.id for e in batch.events), where)
        lease = self.store.lease()
        if lease is not None and lease.until >= self.now:
            self.now = lease.until + 1

    def take_over(self) -> None:
        """A standby takes the lapsed lease, so the stalled run's finish is refused."""
        self.worker = self._new_worker()
        self.store.acquire(self.worker.holder, self.now, self.policy.lease_ttl)

    # -- the moments -------------------------------------------------------------

    def play(self) -> Played:
        """Deliver, run and dispatch at each moment until the recorded window ends."""
        end = self.played.end
        while True:
            self._deliver()
            if self._work():
                continue  # the clock jumped: deliver what fell due meanwhile, then go on
            self._dispatch()
            upcoming = self._next()
            if upcoming is None or upcoming > end:
                return self.played
            self.now = upcoming

    def _deliver(self) -> None:
        while self._inputs and self._inputs[0][0] <= self.now:
            _, rank, _, item = heapq.heappop(self._inputs)
            if isinstance(item, Answered):
                stood = self.store.answer_approval(item.approval, item.reply, self.now)
                self.played.answers[stood] = self.played.answers.get(stood, 0) + 1
                continue
            self._arrive(item)
            if rank == 0 and self.faults is not None:
                later = self.faults.redelivery()
                if later is not None:
                    self._seq += 1
                    self._push(self.now + later, 2, self._seq, item)

    def _arrive(self, arrival: Arrival) -> None:
        try:
            result = self.store.arrive(arrival.source, arrival.key, arrival.payload,
                                       self.now, self.policy.max_payload)
        except BadInput as exc:
            self.played.refused.append((arrival, str(exc)))
            return
        if result.outcome == "stored":
            self.played.delivered += 1
        else:
            self.played.duplicates += 1

    def _work(self) -> bool:
        """Runs while there is work now; True when a fault moved the clock."""
        for _ in range(MAX_RUNS_AT_ONCE):
            at = self.now
            try:
                report = self.worker.run_once()
            except RunKilled:
                generation, events, where = self._killed
                said = " ".join(("SIGKILLed by the fault injector", where)).strip()
                self.played.runs.append(Run(len(self.played.runs) + 1, at, generation, events,
                                            "killed", said))
                self.worker = self._new_worker()
                return True
            self.played.timers_fired += report.timers_fired
            if report.outcome in ("idle", "busy"):
                return False
            self._note(at, report)
            if report.outcome == "refused" and report.generation in self._lapsed:
                return True  # the standby holds the lease now
            if not self._due_now():
                return False  # what the watcher's next, idle pass would find
        return False

    def _due_now(self) -> bool:
        due = self.store.next_work(self.now)
        return due is not None and due <= self.now

    def _note(self, at: int, report: RunReport) -> None:
        outcome = report.outcome
        if outcome == "refused" and report.generation in self._lapsed:
            outcome = self._lapsed[report.generation]
        self.played.runs.append(Run(len(self.played.runs) + 1, at, report.generation,
                                    report.events, outcome, report.error))

    def _dispatch(self) -> None:
        """Dispatch while the outbox may send; like a watching dispatcher, only a read
        when nothing is held."""
        outbox = self.store.status().outbox
        self._waits = []
        if not (outbox["held"] or outbox["sending"]):
            return
        for dispatcher in self.dispatchers:
            while True:
                report = dispatcher.dispatch_once()
                if report.dispatch is None:
                    if report.wait is not None:
                        self._waits.append(report.wait)
                    break

    def _next(self) -> int | None:
        """The next moment anything is due after now."""
        times = []
        if self._inputs:
            times.append(self._inputs[0][0])
        due = self.store.next_work(self.now)
        if due is not None:
            times.append(due)
        times.extend(w.until for w in self._waits if w.held and w.until is not None)
        return max(min(times), self.now + 1) if times else None

