"""What each step kind does, acting on a :class:`Replay`: a store, a simulated clock,
named workers and a recording channel.

A step's action is ``do_<kind>(replay, args)``, ``args`` being the step's fields,
checked. The `run` and `dispatch` steps go through the very
:class:`~agentbox.worker.Worker` and :class:`~agentbox.dispatcher.Dispatcher` the
commands use, with a scripted handler and a recording sender in place of the user's
commands; the other steps are single calls of the :class:`~agentbox.ledger.store.Store`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentbox.dispatcher import Dispatcher
from agentbox.ledger.store import Store
from agentbox.replay.fields import StepError, is_int, is_time
from agentbox.rules.answer import Answer
from agentbox.rules.lease import new_holder_id
from agentbox.rules.outbox import SEPARATOR, Dispatch, Wait
from agentbox.rules.policy import Policy
from agentbox.rules.records import SendOutcome
from agentbox.rules.timers import TimerSpec, cron_due
from agentbox.worker import Batch, Handled, Worker

SHOWN_SEPARATOR = " | "  # how a merged outbox body is shown, as the article prints it
UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400}
# The simulated sender's word; "die" is a dispatcher that died mid-send, so nothing settles.
WORDS: dict[str, tuple[SendOutcome, str | None]] = {
    "ok": ("sent", None), "fail": ("failed", "the sender failed"),
    "unknown": ("unknown", "the sender was killed")}
SENDERS = (*WORDS, "die")


@dataclass
class WorkerState:
    """What a replay remembers of one of the file's named workers: its holder id, the
    generation it last acquired, and what it last claimed under which generation."""

    holder: str
    generation: int | None = None
    claim_gen: int | None = None
    claimed: tuple[int, ...] = ()


@dataclass
class Replay:
    """One replay under way: its inbox, the scenario's policy, the simulated clock, the
    named workers, and the channel that records what may have reached it."""

    store: Store
    policy: Policy
    start: int
    now: int
    workers: dict[str, WorkerState] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)        # dispatch key -> K1, K2, …
    channel: list[tuple[str, str]] = field(default_factory=list)  # (label, body) received
    effects: list[str] = field(default_factory=list)  # keys of the steps whose work ran

    def worker(self, name: str) -> WorkerState:
        """A file's worker name maps to a holder id of its own, never reused."""
        if name not in self.workers:
            self.workers[name] = WorkerState(f"{name}@{new_holder_id()}")
        return self.workers[name]

    def leased(self, name: str) -> tuple[WorkerState, int]:
        worker = self.worker(name)
        if worker.generation is None:
            raise StepError(f"worker {name} has not acquired the lease yet")
        return worker, worker.generation

    def claimant(self, name: str) -> tuple[WorkerState, int]:
        worker = self.worker(name)
        if worker.claim_gen is None:
            raise StepError(f"worker {name} has not claimed anything yet")
        return worker, worker.claim_gen


def do_acquire(replay: Replay, args: Mapping[str, Any]) -> int | None:
    worker = replay.worker(args["worker"])
    generation = replay.store.acquire(worker.holder, replay.now, replay.policy.lease_ttl)
    if generation is not None:
        worker.generation = generation
    return generation


def do_renew(replay: Replay, args: Mapping[str, Any]) -> bool:
    worker, generation = replay.leased(args["worker"])
    return replay.store.renew(worker.holder, generation, replay.now, replay.policy.lease_ttl)


def do_release(replay: Replay, args: Mapping[str, Any]) -> bool:
    worker, generation = replay.leased(args["worker"])
    return replay.store.release(worker.holder, generation, replay.now)


def do_claim(replay: Replay, args: Mapping[str, Any]) -> list[str] | None:
    worker, generation = replay.leased(args["worker"])
    events = replay.store.claim(worker.holder, generation, replay.now, replay.policy)
    if events is None:
        return None
    worker.claim_gen, worker.claimed = generation, tuple(e.id for e in events)
    return [e.source_id for e in events]


def do_finish(replay: Replay, args: Mapping[str, Any]) -> bool:
    """Finish what the worker last claimed, under the generation it claimed with."""
    worker, generation = replay.claimant(args["worker"])
    return replay.store.finish(worker.holder, generation, replay.now, worker.claimed,
                               args["answer"], replay.policy)


def do_fail(replay: Replay, args: Mapping[str, Any]) -> bool:
    worker, generation = replay.claimant(args["worker"])
    return replay.store.fail(worker.holder, generation, replay.now, worker.claimed, args["error"],
                          replay.policy)


def do_crash(replay: Replay, args: Mapping[str, Any]) -> list[str] | None:
    """Take the lease and claim, then never finish: the worker died mid-run."""
    if do_acquire(replay, args) is None:
        return None
    return do_claim(replay, args)


@dataclass(frozen=True)
class ScriptedHandler:
    """The handler of a `run` step: it answers what the file says, at once."""

    answer: Answer

    def check(self) -> None:
        pass

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Handled:
        return Handled(answer=self.answer)


def do_run(replay: Replay, args: Mapping[str, Any]) -> list[str] | str | None:
    """One whole run, made by the worker `agentbox run` uses: tick, acquire, claim,
    handle, finish, release."""
    worker = replay.worker(args["worker"])
    handler = ScriptedHandler(args["answer"])
    report = Worker(replay.store, replay.policy, handler, user="scenario",
                    db=replay.store.location, clock=lambda: replay.now,
                    holder=worker.holder).run_once()
    if report.generation is not None:
        worker.generation = report.generation
    if report.outcome in ("busy", "lost"):
        return None
    if report.outcome == "refused":
        return "refused"
    if report.outcome == "failed":
        return f"error: {report.error}"
    worker.claim_gen, worker.claimed = report.generation, report.events
    return [_source_id(replay, i) for i in report.events]


def _source_id(replay: Replay, event_id: int) -> str:
    event = replay.store.event(event_id)
    assert event is not None
    return event.source_id


class _DiedInside(BaseException):
    """A step's process killed inside its work: nothing records how the try ended."""


def do_step(replay: Replay, args: Mapping[str, Any]) -> str:
    """One journaled step by a worker, through the library ``agentbox step`` uses: the
    fence and the memo, then its work (recorded as an effect), then its end. ``end``
    says how the work ends: done, failed, or the process died inside it (``crash``)."""
    from agentbox.rules.steps import Outcome
    from agentbox.steprun import Fenced, RunRef, Uncertain, journaled

    worker, generation = replay.leased(args["worker"])
    run = RunRef(replay.store.location, "scenario", worker.holder, generation)

    def work(attempt: Any) -> Outcome:
        replay.effects.append(args["key"])
        if args["end"] == "crash":
            raise _DiedInside
        if args["end"] == "failed":
            return Outcome("failed", 1, None, "exit 1")
        return Outcome("done", 0, b"", None)

    try:
        ran = journaled(replay.store, run, args["key"], args["mode"] or replay.policy.step_mode,
                        work, lambda: replay.now)
    except Fenced:
        return "fenced"
    except Uncertain:
        return "uncertain"
    except _DiedInside:
        return "died"
    return ran.action if ran.exit_code == 0 else "failed"


def do_effects(replay: Replay, args: Mapping[str, Any]) -> list[str]:
    return list(replay.effects)


def do_state(replay: Replay, args: Mapping[str, Any]) -> list[Any]:
    state = replay.store.state()
    return [state.version, state.value()]


def do_advance(replay: Replay, args: Mapping[str, Any]) -> None:
    replay.now += args["by"]


def do_set_clock(replay: Replay, args: Mapping[str, Any]) -> None:
    replay.now = args["to"]


def do_ingest(replay: Replay, args: Mapping[str, Any]) -> str:
    return replay.store.ingest(args["source"], args["id"], args["payload"], replay.now).outcome


def do_tick(replay: Replay, args: Mapping[str, Any]) -> int:
    return replay.store.tick(replay.now, replay.policy)


def do_add_timer(replay: Replay, args: Mapping[str, Any]) -> str:
    every, cron, tz = args["every"], args["cron"], args["tz"] or "UTC"
    if cron is not None:  # first due at the expression's next match
        due = cron_due(cron, tz, replay.now)
    elif every is not None:  # without a start: due when added
        due = replay.now if args["start"] is None else args["start"]
    else:
        due = args["due"]
    spec = TimerSpec(name=args["name"], due=due, every=every, payload=args["payload"],
                     catch_up=args["catch_up"], cron=cron, tz=None if cron is None else tz)
    return replay.store.add_timer(spec, replay.now, replace=args["replace"])


def do_remove_timer(replay: Replay, args: Mapping[str, Any]) -> bool:
    return replay.store.remove_timer(args["name"], replay.now)


def do_request(replay: Replay, args: Mapping[str, Any]) -> bool:
    return replay.store.request_approval(args["id"], replay.now, args["expires_in"], args["action"])


def do_answer(replay: Replay, args: Mapping[str, Any]) -> str:
    return replay.store.answer_approval(args["id"], args["reply"], replay.now)


def _shown(body: str) -> str:
    return body.replace(SEPARATOR, SHOWN_SEPARATOR)


@dataclass(frozen=True)
class RecordingChannel:
    """The sender of a `dispatch` step: the channel records what may have reached it."""

    replay: Replay
    word: str

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        if self.word != "fail":
            self.replay.channel.append((self.replay.labels[dispatch.key], dispatch.body))
        return WORDS[self.word]


def do_dispatch(replay: Replay, args: Mapping[str, Any]) -> str:
    """One pass of the dispatcher `agentbox dispatch` uses, with a simulated sender.

    ``ok`` delivers and says so; ``fail`` certainly did not deliver; ``unknown``
    (killed or timed out) and ``die`` (the dispatcher itself died, so nothing
    settles the claim) may have delivered: the channel records them as received.
    """
    policy = replay.policy._replace(delivery=args["mode"] or replay.policy.delivery)
    channel = RecordingChannel(replay, args["sender"])
    dispatcher = Dispatcher(replay.store, policy, channel, lambda: replay.now)
    got = dispatcher.claim()
    if isinstance(got, Wait):
        return "wait" if got.held else "empty"
    replay.labels.setdefault(got.key, f"K{len(replay.labels) + 1}")
    if args["sender"] == "die":
        replay.channel.append((replay.labels[got.key], got.body))
    else:
        dispatcher.deliver(got)
    return _shown(got.body)


def do_resolve(replay: Replay, args: Mapping[str, Any]) -> int:
    keys = {label: key for key, label in replay.labels.items()}
    if args["dispatch"] not in keys:
        raise StepError(f"no dispatch {args['dispatch']} so far (dispatches are named K1, K2, …)")
    return replay.store.resolve_dispatch(keys[args["dispatch"]], args["sent"], replay.now)


def do_event(replay: Replay, args: Mapping[str, Any]) -> list[Any] | None:
    event = replay.store.find(args["source"], args["id"])
    return None if event is None else [event.status, event.attempts]


def _local_time(t: int, tz: str) -> str:
    """A moment as the clock on the wall in ``tz`` reads it, offset included."""
    from agentbox.calendar import zone

    return datetime.fromtimestamp(t, zone(tz)).isoformat()


def _in_unit(seconds: int, unit: str | None) -> int | float:
    if unit is None:
        return seconds
    value = round(seconds / UNITS[unit], 1)
    return int(value) if value == int(value) else value


def do_payload(replay: Replay, args: Mapping[str, Any]) -> Any:
    if args["timer"] is not None:
        # The newest event keyed NAME@scheduled-time.
        fired = replay.store.timer_events(args["timer"])
        event = fired[-1] if fired else None
    else:
        event = replay.store.find(args["source"], args["id"])
    if event is None:
        return None
    value = json.loads(event.payload).get(args["field"])
    if args["tz"] is not None and is_time(value):
        return _local_time(value, args["tz"])
    if args["unit"] is not None and is_int(value):
        return _in_unit(value, args["unit"])
    return value


def do_count(replay: Replay, args: Mapping[str, Any]) -> int:
    status = replay.store.status()
    table, _, state = args["what"].partition(".")
    counts = status.events if table == "events" else status.outbox
    return counts[state] if state else sum(counts.values())


def do_next_due(replay: Replay, args: Mapping[str, Any]) -> int | float | str | None:
    for timer in replay.store.timers():
        if timer.name == args["timer"]:
            if args["tz"] is not None:
                return _local_time(timer.due, args["tz"])
            return _in_unit(timer.due - replay.now, args["unit"])
    return None


def do_sends(replay: Replay, args: Mapping[str, Any]) -> list[str]:
    return [label if args["keys"] else _shown(body) for label, body in replay.channel]


def do_lease(replay: Replay, args: Mapping[str, Any]) -> list[Any] | None:
    lease = replay.store.lease()
    if lease is None:
        return None
    names = {w.holder: name for name, w in replay.workers.items()}
    return [names.get(lease.holder, lease.holder), lease.generation]

