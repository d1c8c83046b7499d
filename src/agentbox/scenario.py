"""Scenario files: the article's failure cases, and a user's own, as data.

A scenario is a TOML file of steps against a simulated clock (the format is
described in docs/scenarios.md). :func:`run` replays one through the
:class:`~agentbox.store.Store` on a fresh throwaway inbox and records what
each step observed next to what it expected. Its ``run`` and ``dispatch``
steps go through the very :class:`~agentbox.worker.Worker` and
:class:`~agentbox.dispatcher.Dispatcher` the commands use, with a scripted
handler and sender in place of the user's commands. Nothing here decides an
outcome: every rule lives behind the store, so a broken rule shows up as a
step that differs.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from agentbox.dispatcher import Dispatcher
from agentbox.durations import FIRST_TIME, LAST_TIME, format_duration, parse_duration
from agentbox.errors import AgentboxError, BadInput, UsageError
from agentbox.rules.answer import Answer
from agentbox.rules.answer import parse as parse_answer
from agentbox.rules.lease import new_holder_id
from agentbox.rules.outbox import SEPARATOR, Dispatch, Wait
from agentbox.rules.policy import Policy
from agentbox.rules.records import (
    CATCH_UP_MODES,
    DELIVERY_MODES,
    EVENT_STATES,
    OUTBOX_STATES,
    SendOutcome,
)
from agentbox.rules.timers import TimerSpec, cron_due
from agentbox.store import Store, scratch_store
from agentbox.worker import Batch, Outcome, Worker

DEFAULT_START = 1_000_000  # the article's simulated clock starts here
PACKAGE = "agentbox.scenarios"
SHOWN_SEPARATOR = " | "  # how a merged outbox body is shown, as the article prints it
COUNTABLE = ("events", *(f"events.{s}" for s in EVENT_STATES),
             "outbox", *(f"outbox.{s}" for s in OUTBOX_STATES))
UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400}
# The simulated sender's word; "die" is a dispatcher that died mid-send, so nothing settles.
WORDS: dict[str, tuple[SendOutcome, str | None]] = {
    "ok": ("sent", None), "fail": ("failed", "the sender failed"),
    "unknown": ("unknown", "the sender was killed")}
SENDERS = (*WORDS, "die")
_TOP_KEYS = ("title", "story", "description", "start", "settings", "step")
_COMMON = ("do", "expect", "at", "label")


class _Bad(Exception):
    """A problem with one step, turned into a message naming the file and step."""


# --- field checks: each takes the raw TOML value and the scenario's start ---

Check = Callable[[Any, int], Any]


def _text(value: Any, start: int) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad(f"must be a non-empty string, not {value!r}")
    return value


def _flag(value: Any, start: int) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, not {value!r}")
    return value


def _duration(value: Any, start: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _Bad(f"must be a duration such as 90s, 4h or 1d, not {value!r}")
    try:
        return parse_duration(value)
    except BadInput as exc:
        raise _Bad(str(exc)) from None


def _moment(value: Any) -> int | None:
    """Unix seconds written as such or as a TOML date-time with an offset; else None."""
    if isinstance(value, datetime) and value.utcoffset() is not None:
        value = int(value.timestamp())
    return int(value) if _is_time(value) else None


def _time(value: Any, start: int) -> int:
    """Unix seconds, a TOML date-time with an offset (2026-03-08T03:00:00-04:00), or
    '+DURATION' from the scenario's start ('+0s' is the start)."""
    moment = _moment(value)
    if moment is not None:
        return moment
    if isinstance(value, str) and value.startswith("+"):
        offset = value[1:].strip()
        return start if offset in ("0", "0s") else start + _duration(offset, start)
    raise _Bad(f"must be Unix seconds (within the years 1 to 9999), a date-time with an "
               f"offset, or '+DURATION' from the start, not {value!r}")


def _cron(value: Any, start: int) -> str:
    from agentbox.calendar import check_cron

    try:
        return check_cron(_text(value, start))
    except BadInput as exc:
        raise _Bad(str(exc)) from None


def _zone(value: Any, start: int) -> str:
    from agentbox.calendar import zone

    try:
        zone(_text(value, start))
    except BadInput as exc:
        raise _Bad(str(exc)) from None
    return str(value)


def _object(value: Any, start: int) -> str:
    from agentbox.jsonutil import canonical_object

    if not isinstance(value, dict):
        raise _Bad(f"must be a table, not {value!r}")
    try:
        return canonical_object(value)
    except (TypeError, BadInput) as exc:  # TypeError: TOML dates are not JSON
        raise _Bad(f"must hold only JSON values: {exc}") from None


def _list(value: Any, start: int) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad(f"must be a list, not {value!r}")
    return value


def _choice(*options: str) -> Check:
    def check(value: Any, start: int) -> str:
        if value not in options:
            raise _Bad(f"must be one of {', '.join(options)}, not {value!r}")
        return str(value)
    return check


# --- what an `expect` may be, per kind ---

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value: Any) -> bool:
    """Unix seconds SQLite can store and a date can show (the years 1 to 9999)."""
    return _is_int(value) and FIRST_TIME <= value <= LAST_TIME


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_pair(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and _is_int(value[1]))


def _one_of(*words: str) -> Callable[[Any], bool]:
    return lambda value: value in words


@dataclass(frozen=True)
class Expect:
    accepts: Callable[[Any], bool]
    says: str  # for the error message when a file's expect does not fit


_BOOL = Expect(lambda v: isinstance(v, bool), "true or false")
_INT = Expect(_is_int, "a whole number")
_BATCH = Expect(lambda v: _is_strings(v) or _is_int(v) or v in ("none", "refused"),
                "a list of source ids, a batch size, or \"none\"")


# --- the run: a simulated clock, named workers and a recording channel ---

@dataclass
class _Worker:
    holder: str
    generation: int | None = None
    claim_gen: int | None = None
    claimed: tuple[int, ...] = ()


@dataclass
class _Run:
    store: Store
    policy: Policy
    start: int
    now: int
    workers: dict[str, _Worker] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)        # dispatch key -> K1, K2, …
    channel: list[tuple[str, str]] = field(default_factory=list)  # (label, body) received

    def worker(self, name: str) -> _Worker:
        """A file's worker name maps to a holder id of its own, never reused."""
        if name not in self.workers:
            self.workers[name] = _Worker(f"{name}@{new_holder_id()}")
        return self.workers[name]

    def leased(self, name: str) -> tuple[_Worker, int]:
        worker = self.worker(name)
        if worker.generation is None:
            raise _Bad(f"worker {name} has not acquired the lease yet")
        return worker, worker.generation

    def claimant(self, name: str) -> tuple[_Worker, int]:
        worker = self.worker(name)
        if worker.claim_gen is None:
            raise _Bad(f"worker {name} has not claimed anything yet")
        return worker, worker.claim_gen


def _acquire(run: _Run, a: Mapping[str, Any]) -> int | None:
    worker = run.worker(a["worker"])
    generation = run.store.acquire(worker.holder, run.now, run.policy.lease_ttl)
    if generation is not None:
        worker.generation = generation
    return generation


def _renew(run: _Run, a: Mapping[str, Any]) -> bool:
    worker, generation = run.leased(a["worker"])
    return run.store.renew(worker.holder, generation, run.now, run.policy.lease_ttl)


def _release(run: _Run, a: Mapping[str, Any]) -> bool:
    worker, generation = run.leased(a["worker"])
    return run.store.release(worker.holder, generation, run.now)


def _claim(run: _Run, a: Mapping[str, Any]) -> list[str] | None:
    worker, generation = run.leased(a["worker"])
    events = run.store.claim(worker.holder, generation, run.now, run.policy)
    if events is None:
        return None
    worker.claim_gen, worker.claimed = generation, tuple(e.id for e in events)
    return [e.source_id for e in events]


def _finish(run: _Run, a: Mapping[str, Any]) -> bool:
    """Finish what the worker last claimed, under the generation it claimed with."""
    worker, generation = run.claimant(a["worker"])
    return run.store.finish(worker.holder, generation, run.now, worker.claimed, a["answer"])


def _fail(run: _Run, a: Mapping[str, Any]) -> bool:
    worker, generation = run.claimant(a["worker"])
    return run.store.fail(worker.holder, generation, run.now, worker.claimed, a["error"],
                          run.policy)


def _crash(run: _Run, a: Mapping[str, Any]) -> list[str] | None:
    """Take the lease and claim, then never finish: the worker died mid-run."""
    if _acquire(run, a) is None:
        return None
    return _claim(run, a)


@dataclass(frozen=True)
class _Scripted:
    """The handler of a `run` step: it answers what the file says, at once."""

    answer: Answer

    def check(self) -> None:
        pass

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Outcome:
        return Outcome(answer=self.answer)


def _run(run: _Run, a: Mapping[str, Any]) -> list[str] | str | None:
    """One whole run, made by the worker `agentbox run` uses: tick, acquire, claim,
    handle, finish, release."""
    worker = run.worker(a["worker"])
    report = Worker(run.store, run.policy, _Scripted(a["answer"]), user="scenario",
                    db=run.store.location, clock=lambda: run.now,
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
    return [_source_id(run, i) for i in report.events]


def _source_id(run: _Run, event_id: int) -> str:
    event = run.store.event(event_id)
    assert event is not None
    return event.source_id


def _advance(run: _Run, a: Mapping[str, Any]) -> None:
    run.now += a["by"]


def _set_clock(run: _Run, a: Mapping[str, Any]) -> None:
    run.now = a["to"]


def _ingest(run: _Run, a: Mapping[str, Any]) -> str:
    return run.store.ingest(a["source"], a["id"], a["payload"], run.now).outcome


def _tick(run: _Run, a: Mapping[str, Any]) -> int:
    return run.store.tick(run.now, run.policy)


def _add_timer(run: _Run, a: Mapping[str, Any]) -> str:
    every, cron, tz = a["every"], a["cron"], a["tz"] or "UTC"
    if cron is not None:  # first due at the expression's next match
        due = cron_due(cron, tz, run.now)
    elif every is not None:  # without a start: due when added
        due = run.now if a["start"] is None else a["start"]
    else:
        due = a["due"]
    spec = TimerSpec(name=a["name"], due=due, every=every, payload=a["payload"],
                     catch_up=a["catch_up"], cron=cron, tz=None if cron is None else tz)
    return run.store.add_timer(spec, run.now, replace=a["replace"])


def _remove_timer(run: _Run, a: Mapping[str, Any]) -> bool:
    return run.store.remove_timer(a["name"], run.now)


def _request(run: _Run, a: Mapping[str, Any]) -> bool:
    return run.store.request_approval(a["id"], run.now, a["expires_in"], a["action"])


def _answer(run: _Run, a: Mapping[str, Any]) -> str:
    return run.store.answer_approval(a["id"], a["reply"], run.now)


def _shown(body: str) -> str:
    return body.replace(SEPARATOR, SHOWN_SEPARATOR)


@dataclass(frozen=True)
class _Channel:
    """The sender of a `dispatch` step: the channel records what may have reached it."""

    run: _Run
    word: str

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        if self.word != "fail":
            self.run.channel.append((self.run.labels[dispatch.key], dispatch.body))
        return WORDS[self.word]


def _dispatch(run: _Run, a: Mapping[str, Any]) -> str:
    """One pass of the dispatcher `agentbox dispatch` uses, with a simulated sender.

    ``ok`` delivers and says so; ``fail`` certainly did not deliver; ``unknown``
    (killed or timed out) and ``die`` (the dispatcher itself died, so nothing
    settles the claim) may have delivered: the channel records them as received.
    """
    policy = run.policy._replace(delivery=a["mode"] or run.policy.delivery)
    dispatcher = Dispatcher(run.store, policy, _Channel(run, a["sender"]), lambda: run.now)
    got = dispatcher.claim()
    if isinstance(got, Wait):
        return "wait" if got.held else "empty"
    run.labels.setdefault(got.key, f"K{len(run.labels) + 1}")
    if a["sender"] == "die":
        run.channel.append((run.labels[got.key], got.body))
    else:
        dispatcher.deliver(got)
    return _shown(got.body)


def _resolve(run: _Run, a: Mapping[str, Any]) -> int:
    keys = {label: key for key, label in run.labels.items()}
    if a["dispatch"] not in keys:
        raise _Bad(f"no dispatch {a['dispatch']} so far (dispatches are named K1, K2, …)")
    return run.store.resolve_dispatch(keys[a["dispatch"]], a["sent"], run.now)


def _event(run: _Run, a: Mapping[str, Any]) -> list[Any] | None:
    event = run.store.find(a["source"], a["id"])
    return None if event is None else [event.status, event.attempts]


def _local(t: int, tz: str) -> str:
    """A moment as the clock on the wall in ``tz`` reads it, offset included."""
    from agentbox.calendar import zone

    return datetime.fromtimestamp(t, zone(tz)).isoformat()


def _in_unit(seconds: int, unit: str | None) -> int | float:
    if unit is None:
        return seconds
    value = round(seconds / UNITS[unit], 1)
    return int(value) if value == int(value) else value


def _payload(run: _Run, a: Mapping[str, Any]) -> Any:
    if a["timer"] is not None:
        # The newest event keyed NAME@scheduled-time.
        fired = run.store.timer_events(a["timer"])
        event = fired[-1] if fired else None
    else:
        event = run.store.find(a["source"], a["id"])
    if event is None:
        return None
    value = json.loads(event.payload).get(a["field"])
    if a["tz"] is not None and _is_time(value):
        return _local(value, a["tz"])
    if a["unit"] is not None and _is_int(value):
        return _in_unit(value, a["unit"])
    return value


def _count(run: _Run, a: Mapping[str, Any]) -> int:
    status = run.store.status()
    table, _, state = a["what"].partition(".")
    counts = status.events if table == "events" else status.outbox
    return counts[state] if state else sum(counts.values())


def _next_due(run: _Run, a: Mapping[str, Any]) -> int | float | str | None:
    for timer in run.store.timers():
        if timer.name == a["timer"]:
            if a["tz"] is not None:
                return _local(timer.due, a["tz"])
            return _in_unit(timer.due - run.now, a["unit"])
    return None


def _sends(run: _Run, a: Mapping[str, Any]) -> list[str]:
    return [label if a["keys"] else _shown(body) for label, body in run.channel]


def _lease(run: _Run, a: Mapping[str, Any]) -> list[Any] | None:
    lease = run.store.lease()
    if lease is None:
        return None
    names = {w.holder: name for name, w in run.workers.items()}
    return [names.get(lease.holder, lease.holder), lease.generation]


# --- the step kinds ---

def _ingest_shape(observed: Any, expect: Any) -> Any:
    """`expect = true/false` asks whether a row was stored, as the article prints it."""
    return observed == "stored" if isinstance(expect, bool) else observed


def _batch_shape(observed: Any, expect: Any) -> Any:
    """`expect = N` asks for the batch size instead of the source ids."""
    return len(observed) if _is_int(expect) and isinstance(observed, list) else observed


def _answer_fields(a: dict[str, Any]) -> None:
    """A finish carries the handler's answer: messages, approvals, timers."""
    doc = {k: a.pop(k) for k in ("messages", "approvals", "timers") if a.get(k) is not None}
    try:
        a["answer"] = parse_answer(json.dumps(doc))
    except BadInput as exc:
        raise _Bad(str(exc)) from None


def _timer_fields(a: dict[str, Any]) -> None:
    given = [k for k in ("every", "cron", "due") if a[k] is not None]
    if len(given) != 1:
        raise _Bad("needs one of 'every' or 'cron' (a recurring timer) or 'due' (a one-off)")
    if a["every"] is None and a["start"] is not None:
        raise _Bad("'start' is for an 'every' timer; a cron timer is first due at its next "
                   "match, a one-off has 'due'")
    if a["cron"] is None and a["tz"] is not None:
        raise _Bad("'tz' goes with 'cron'")


def _payload_fields(a: dict[str, Any]) -> None:
    by_key = a["source"] is not None or a["id"] is not None
    if a["timer"] is not None and by_key:
        raise _Bad("names the event by 'timer' or by 'source' and 'id', not both")
    if a["timer"] is None and (a["source"] is None or a["id"] is None):
        raise _Bad("names the event by 'timer', or by 'source' and 'id'")


@dataclass(frozen=True)
class Kind:
    act: Callable[[_Run, Mapping[str, Any]], Any]
    label: Callable[[Mapping[str, Any]], str]
    required: Mapping[str, Check] = field(default_factory=dict)
    optional: Mapping[str, tuple[Check, Any]] = field(default_factory=dict)
    expect: Expect | None = None  # None: a clock step, which checks nothing
    shape: Callable[[Any, Any], Any] | None = None
    check: Callable[[dict[str, Any]], None] | None = None


_WORKER = {"worker": _text}
_ANSWER: dict[str, tuple[Check, Any]] = {
    "messages": (_list, None), "approvals": (_list, None), "timers": (_list, None)}

KINDS: dict[str, Kind] = {
    "ingest": Kind(_ingest, lambda a: f"ingest {a['source']}/{a['id']}",
                   {"source": _text, "id": _text}, {"payload": (_object, "{}")},
                   Expect(lambda v: isinstance(v, bool) or v in ("stored", "duplicate",
                                                                  "conflict"),
                          "true/false or stored, duplicate, conflict"), _ingest_shape),
    "acquire": Kind(_acquire, lambda a: f"{a['worker']} acquires the lease", _WORKER,
                    expect=Expect(lambda v: _is_int(v) or v == "none",
                                  "a generation or \"none\"")),
    "renew": Kind(_renew, lambda a: f"{a['worker']} renews its lease", _WORKER, expect=_BOOL),
    "release": Kind(_release, lambda a: f"{a['worker']} releases its lease", _WORKER,
                    expect=_BOOL),
    "claim": Kind(_claim, lambda a: f"{a['worker']} claims", _WORKER, expect=_BATCH,
                  shape=_batch_shape),
    "finish": Kind(_finish, lambda a: f"{a['worker']} finishes its claim", _WORKER, _ANSWER,
                   _BOOL, check=_answer_fields),
    "fail": Kind(_fail, lambda a: f"{a['worker']} fails: {a['error']}", _WORKER,
                 {"error": (_text, "the handler failed")}, _BOOL),
    "crash": Kind(_crash, lambda a: f"{a['worker']} claims and crashes", _WORKER,
                  expect=_BATCH, shape=_batch_shape),
    "run": Kind(_run, lambda a: f"{a['worker']} runs", _WORKER, _ANSWER, _BATCH,
                _batch_shape, _answer_fields),
    "advance": Kind(_advance, lambda a: f"clock advances {format_duration(a['by'])}",
                    {"by": _duration}),
    "set_clock": Kind(_set_clock, lambda a: "clock set", {"to": _time}),
    "tick": Kind(_tick, lambda a: "scheduler pass", expect=_INT),
    "add_timer": Kind(
        _add_timer, lambda a: f"{'replace' if a['replace'] else 'add'} timer {a['name']}",
        {"name": _text},
        {"every": (_duration, None), "start": (_time, None), "due": (_time, None),
         "cron": (_cron, None), "tz": (_zone, None),
         "payload": (_object, "{}"), "catch_up": (_choice(*CATCH_UP_MODES), "coalesce"),
         "replace": (_flag, False)},
        Expect(_one_of("added", "unchanged", "replaced", "error"),
               "added, unchanged, replaced or error"), check=_timer_fields),
    "remove_timer": Kind(_remove_timer, lambda a: f"remove timer {a['name']}",
                         {"name": _text}, expect=_BOOL),
    "request": Kind(_request, lambda a: f"request approval {a['id']}",
                    {"id": _text, "expires_in": _duration, "action": _text}, expect=_BOOL),
    "answer": Kind(_answer, lambda a: f"answer {a['id']}: {a['reply']}",
                   {"id": _text, "reply": _choice("yes", "no")},
                   expect=Expect(_one_of("yes", "no", "expired", "unknown"),
                                 "yes, no, expired or unknown")),
    "dispatch": Kind(_dispatch, lambda a: f"dispatch, sender {a['sender']}", {},
                     {"sender": (_choice(*SENDERS), "ok"),
                      "mode": (_choice(*DELIVERY_MODES), None)},
                     Expect(lambda v: isinstance(v, str), "the body sent, wait or empty")),
    "resolve": Kind(_resolve,
                    lambda a: f"resolve {a['dispatch']} as {'sent' if a['sent'] else 'unsent'}",
                    {"dispatch": _text, "sent": _flag}, expect=_INT),
    "event": Kind(_event, lambda a: f"{a['source']}/{a['id']}: status, attempts",
                  {"source": _text, "id": _text},
                  expect=Expect(lambda v: _is_pair(v) or v == "none",
                                "[status, attempts] or \"none\"")),
    "payload": Kind(
        _payload,
        lambda a: (f"newest {a['timer']} event" if a["timer"] else f"{a['source']}/{a['id']}")
        + f": {a['field']}" + (f" ({a['unit']})" if a["unit"] else "")
        + (f" in {a['tz']}" if a["tz"] else ""),
        {"field": _text},
        {"timer": (_text, None), "source": (_text, None), "id": (_text, None),
         "unit": (_choice(*UNITS), None), "tz": (_zone, None)},
        Expect(lambda v: True, "any value"), check=_payload_fields),
    "count": Kind(_count, lambda a: f"count {a['what']}", {"what": _choice(*COUNTABLE)},
                  expect=_INT),
    "next_due": Kind(_next_due,
                     lambda a: (f"{a['timer']} next due, {a['tz']} time" if a["tz"]
                                else f"{a['timer']} next due in ({a['unit']})"),
                     {"timer": _text}, {"unit": (_choice(*UNITS), "h"), "tz": (_zone, None)},
                     Expect(lambda v: _is_number(v) or isinstance(v, str),
                            "a number, a local time or \"none\"")),
    "sends": Kind(_sends, lambda a: "dispatch keys so far" if a["keys"] else "sends so far",
                  {}, {"keys": (_flag, False)},
                  Expect(_is_strings, "a list of strings")),
    "lease": Kind(_lease, lambda a: "lease holder, generation",
                  expect=Expect(lambda v: _is_pair(v) or v == "none",
                                "[worker, generation] or \"none\"")),
}


# --- scenarios and their results ---

@dataclass(frozen=True)
class Step:
    n: int
    kind: str
    args: Mapping[str, Any]
    expect: Any  # None for a clock step
    at: int | None
    label: str

    @property
    def checks(self) -> bool:
        return KINDS[self.kind].expect is not None


@dataclass(frozen=True)
class Scenario:
    name: str
    origin: str  # the file, as error messages name it
    title: str
    story: str  # what goes wrong without the rule, shown above the table
    description: str
    start: int
    settings: Mapping[str, Any]
    policy: Policy
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Result:
    step: Step
    at: int
    observed: Any
    ok: bool | None  # None for a clock step


@dataclass(frozen=True)
class Report:
    scenario: Scenario
    results: tuple[Result, ...]

    @property
    def passed(self) -> int:
        return sum(r.ok is True for r in self.results)

    @property
    def failed(self) -> int:
        return sum(r.ok is False for r in self.results)

    @property
    def checked(self) -> int:
        return sum(r.ok is not None for r in self.results)

    def document(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "name": s.name, "title": s.title, "story": s.story,
            "description": s.description,
            "file": s.origin, "start": s.start, "settings": dict(s.settings),
            "steps": [{"n": r.step.n, "do": r.step.kind, "label": r.step.label,
                       "at": r.at, "clock": offset(r.at, s.start),
                       "expected": r.step.expect, "observed": r.observed, "ok": r.ok}
                      for r in self.results],
            "checked": self.checked, "passed": self.passed, "failed": self.failed,
        }


def offset(at: int, start: int) -> str:
    """A moment as '+DURATION' from the scenario's start."""
    delta = at - start
    return ("+" if delta >= 0 else "-") + format_duration(abs(delta))


def show(value: Any) -> str:
    """A value as the tables show it: strings bare, the rest as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- reading files ---

def _step(raw: Any, n: int, start: int) -> Step:
    if not isinstance(raw, dict):
        raise _Bad("must be a table ([[step]])")
    kind_name = raw.get("do")
    if kind_name is None:
        raise _Bad("missing field 'do' (the step kind)")
    if kind_name not in KINDS:
        raise _Bad(f"unknown step kind {kind_name!r} (known: {', '.join(KINDS)})")
    kind = KINDS[kind_name]
    known = {*_COMMON, *kind.required, *kind.optional}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _Bad(f"unknown field {unknown[0]!r} (this kind takes "
                   f"{', '.join(sorted(known - {'do'}))})")
    args: dict[str, Any] = {}
    for name, check in kind.required.items():
        if name not in raw:
            raise _Bad(f"missing field {name!r}")
        args[name] = _field(name, check, raw[name], start)
    for name, (check, default) in kind.optional.items():
        args[name] = _field(name, check, raw[name], start) if name in raw else default
    if kind.check is not None:
        kind.check(args)
    if kind.expect is None:
        if "expect" in raw:
            raise _Bad("a clock step takes no 'expect'")
    elif "expect" not in raw:
        raise _Bad(f"missing field 'expect' ({kind.expect.says})")
    elif not (kind.expect.accepts(raw["expect"]) or raw["expect"] == "error"):
        raise _Bad(f"field 'expect' must be {kind.expect.says}, not {raw['expect']!r}")
    at = _field("at", _time, raw["at"], start) if "at" in raw else None
    label = _field("label", _text, raw["label"], start) if "label" in raw else kind.label(args)
    return Step(n, kind_name, args, raw.get("expect"), at, label)


def _field(name: str, check: Check, value: Any, start: int) -> Any:
    try:
        return check(value, start)
    except _Bad as exc:
        raise _Bad(f"field {name!r} {exc}") from None


def _policy(settings: Any, origin: str) -> Policy:
    from agentbox.config import KEYS, parse_settings

    if not isinstance(settings, dict):
        raise BadInput(f"{origin}: [settings] must be a table")
    allowed = [name for name in Policy._fields if name in KEYS]
    return Policy(**parse_settings(settings, f"{origin}: settings", allowed))


def _prose(doc: Mapping[str, Any], key: str, origin: str) -> str:
    """Free text, optional; a TOML multi-line string loses its surrounding newlines."""
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise BadInput(f"{origin}: {key!r} must be a string")
    return value.strip()


def parse(text: str, origin: str, name: str) -> Scenario:
    """A scenario from TOML text; any problem is one BadInput line naming the file."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{origin}: invalid TOML: {exc}") from None
    unknown = sorted(set(doc) - set(_TOP_KEYS))
    if unknown:
        raise BadInput(f"{origin}: unknown key {unknown[0]!r} "
                       f"(a scenario has {', '.join(_TOP_KEYS)})")
    title = doc.get("title")
    if not isinstance(title, str) or not title:
        raise BadInput(f"{origin}: missing 'title' (a non-empty string)")
    story, description = (_prose(doc, key, origin) for key in ("story", "description"))
    start = _moment(doc.get("start", DEFAULT_START))
    if start is None:
        raise BadInput(f"{origin}: 'start' must be Unix seconds (a whole number) within the "
                       "years 1 to 9999, or a date-time with an offset")
    settings = doc.get("settings", {})
    policy = _policy(settings, origin)
    raw_steps = doc.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise BadInput(f"{origin}: no steps (write each one as a [[step]] table)")
    steps = []
    for n, raw in enumerate(raw_steps, 1):
        kind = raw.get("do") if isinstance(raw, dict) else None
        where = f"step {n} ({kind})" if isinstance(kind, str) and kind in KINDS else f"step {n}"
        try:
            steps.append(_step(raw, n, start))
        except _Bad as exc:
            raise BadInput(f"{origin}: {where}: {exc}") from None
    return Scenario(name, origin, title, story, description, start, settings, policy,
                    tuple(steps))


def shipped() -> list[tuple[str, Traversable]]:
    """The scenario files that ship with agentbox, in order."""
    folder = resources.files(PACKAGE)
    found = [(f.name.removesuffix(".toml"), f) for f in folder.iterdir()
             if f.name.endswith(".toml")]
    return sorted(found, key=lambda item: item[0])


def _matches(token: str, name: str) -> bool:
    number, _, words = name.partition("-")
    if token.isdigit() and number.isdigit():
        return int(token) == int(number)
    return token in (name, words, f"{name}.toml")


def _read(source: Traversable | Path, origin: str) -> str:
    try:
        return source.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{origin}: not UTF-8 text") from None
    except OSError as exc:
        raise BadInput(f"{origin}: cannot read: {exc.strerror or exc}") from None


def load(token: str) -> Scenario:
    """A shipped scenario by number or name (`4`, `04`, `lease-takeover`), else a file."""
    looks_like_path = "/" in token or token.endswith(".toml")
    if not looks_like_path or not Path(token).exists():
        for name, source in shipped():
            if _matches(token, name):
                return parse(_read(source, source.name), source.name, name)
    path = Path(token)
    if not path.exists():
        raise UsageError(f"no scenario named {token!r} and no such file "
                         "('agentbox scenarios --list' names the shipped ones)")
    if path.is_dir():
        raise BadInput(f"{token}: is a directory, not a scenario file")
    return parse(_read(path, token), token, path.stem)


def load_all(tokens: Sequence[str]) -> list[Scenario]:
    if tokens:
        return [load(token) for token in tokens]
    return [parse(_read(source, source.name), source.name, name) for name, source in shipped()]


# --- running ---

def _plain(value: Any) -> Any:
    """What a step observed, in the terms a file writes: TOML has no null."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def same(expected: Any, observed: Any) -> bool:
    """Equality that keeps true apart from 1; `expect = "error"` matches any error."""
    if expected == "error" and isinstance(observed, str):
        return observed.startswith("error: ")
    if isinstance(expected, bool) or isinstance(observed, bool):
        return type(expected) is type(observed) and expected == observed
    if _is_number(expected) and _is_number(observed):
        return bool(expected == observed)
    if isinstance(expected, list) and isinstance(observed, list):
        return len(expected) == len(observed) and all(
            same(e, o) for e, o in zip(expected, observed, strict=True))
    if isinstance(expected, dict) and isinstance(observed, dict):
        return expected.keys() == observed.keys() and all(
            same(v, observed[k]) for k, v in expected.items())
    return type(expected) is type(observed) and bool(expected == observed)


def _play(run: _Run, step: Step, origin: str) -> Result:
    if step.at is not None:
        run.now = step.at
    kind = KINDS[step.kind]
    try:
        observed = kind.act(run, step.args)
    except AgentboxError as exc:
        observed = f"error: {exc}"
    except _Bad as exc:
        raise BadInput(f"{origin}: step {step.n} ({step.kind}): {exc}") from None
    if not step.checks:
        return Result(step, run.now, f"clock {offset(run.now, run.start)}", None)
    observed = _plain(observed)
    if kind.shape is not None:
        observed = kind.shape(observed, step.expect)
    return Result(step, run.now, observed, same(step.expect, observed))


def run(scenario: Scenario, database: str | None = None) -> Report:
    """Replay a scenario on a fresh throwaway inbox; the report says what differed.

    The inbox is a temporary SQLite file, or with a PostgreSQL URL in
    ``database`` a temporary schema in that database, dropped afterwards.
    """
    with scratch_store(database, "scenario") as store:
        state = _Run(store, scenario.policy, scenario.start, scenario.start)
        results = tuple(_play(state, step, scenario.origin) for step in scenario.steps)
    return Report(scenario, results)
