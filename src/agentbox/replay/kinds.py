"""The step kinds a scenario file may use: each one's action, fields, label and expect."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentbox.durations import format_duration
from agentbox.errors import BadInput
from agentbox.replay.actions import (
    SENDERS,
    UNITS,
    Replay,
    do_acquire,
    do_add_timer,
    do_advance,
    do_answer,
    do_claim,
    do_count,
    do_crash,
    do_dispatch,
    do_effects,
    do_event,
    do_fail,
    do_finish,
    do_ingest,
    do_lease,
    do_next_due,
    do_payload,
    do_release,
    do_remove_timer,
    do_renew,
    do_request,
    do_resolve,
    do_run,
    do_sends,
    do_set_clock,
    do_state,
    do_step,
    do_tick,
)
from agentbox.replay.fields import (
    BATCH,
    BOOL,
    INT,
    Check,
    Expect,
    StepError,
    choice,
    cron,
    duration,
    flag,
    is_int,
    is_number,
    is_pair,
    is_strings,
    json_object,
    one_of,
    text,
    toml_list,
    when,
    zone,
)
from agentbox.rules.answer import parse as parse_answer
from agentbox.rules.records import CATCH_UP_MODES, DELIVERY_MODES, EVENT_STATES, OUTBOX_STATES
from agentbox.rules.steps import STEP_MODES

COUNTABLE = ("events", *(f"events.{s}" for s in EVENT_STATES),
             "outbox", *(f"outbox.{s}" for s in OUTBOX_STATES))


def _ingest_shape(observed: Any, expect: Any) -> Any:
    """`expect = true/false` asks whether a row was stored, as the article prints it."""
    return observed == "stored" if isinstance(expect, bool) else observed


def _batch_shape(observed: Any, expect: Any) -> Any:
    """`expect = N` asks for the batch size instead of the source ids."""
    return len(observed) if is_int(expect) and isinstance(observed, list) else observed


def _answer_fields(args: dict[str, Any]) -> None:
    """A finish carries the handler's answer: messages, approvals, timers, state."""
    doc = {k: args.pop(k) for k in ("messages", "approvals", "timers") if args.get(k) is not None}
    doc.update({k: json.loads(args.pop(k)) for k in ("state", "state_patch")
                if args.get(k) is not None})
    try:
        args["answer"] = parse_answer(json.dumps(doc))
    except BadInput as exc:
        raise StepError(str(exc)) from None


def _timer_fields(args: dict[str, Any]) -> None:
    given = [k for k in ("every", "cron", "due") if args[k] is not None]
    if len(given) != 1:
        raise StepError("needs one of 'every' or 'cron' (a recurring timer) or 'due' (a one-off)")
    if args["every"] is None and args["start"] is not None:
        raise StepError("'start' is for an 'every' timer; a cron timer is first due at its "
                        "next match, a one-off has 'due'")
    if args["cron"] is None and args["tz"] is not None:
        raise StepError("'tz' goes with 'cron'")


def _payload_fields(args: dict[str, Any]) -> None:
    by_key = args["source"] is not None or args["id"] is not None
    if args["timer"] is not None and by_key:
        raise StepError("names the event by 'timer' or by 'source' and 'id', not both")
    if args["timer"] is None and (args["source"] is None or args["id"] is None):
        raise StepError("names the event by 'timer', or by 'source' and 'id'")


@dataclass(frozen=True)
class Kind:
    act: Callable[[Replay, Mapping[str, Any]], Any]
    label: Callable[[Mapping[str, Any]], str]
    required: Mapping[str, Check] = field(default_factory=dict)
    optional: Mapping[str, tuple[Check, Any]] = field(default_factory=dict)
    expect: Expect | None = None  # None: a clock step, which checks nothing
    shape: Callable[[Any, Any], Any] | None = None
    check: Callable[[dict[str, Any]], None] | None = None


_WORKER = {"worker": text}
_ANSWER: dict[str, tuple[Check, Any]] = {
    "messages": (toml_list, None), "approvals": (toml_list, None), "timers": (toml_list, None),
    "state": (json_object, None), "state_patch": (json_object, None)}

KINDS: dict[str, Kind] = {
    "ingest": Kind(
        do_ingest, lambda args: f"ingest {args['source']}/{args['id']}",
        {"source": text, "id": text}, {"payload": (json_object, "{}")},
        Expect(lambda v: isinstance(v, bool) or v in ("stored", "duplicate", "conflict"),
               "true/false or stored, duplicate, conflict"), _ingest_shape),
    "acquire": Kind(
        do_acquire, lambda args: f"{args['worker']} acquires the lease", _WORKER,
        expect=Expect(lambda v: is_int(v) or v == "none", "a generation or \"none\"")),
    "renew": Kind(do_renew, lambda args: f"{args['worker']} renews its lease", _WORKER,
                  expect=BOOL),
    "release": Kind(do_release, lambda args: f"{args['worker']} releases its lease", _WORKER,
                    expect=BOOL),
    "claim": Kind(do_claim, lambda args: f"{args['worker']} claims", _WORKER, expect=BATCH,
                  shape=_batch_shape),
    "finish": Kind(do_finish, lambda args: f"{args['worker']} finishes its claim", _WORKER,
                   _ANSWER, BOOL, check=_answer_fields),
    "fail": Kind(do_fail, lambda args: f"{args['worker']} fails: {args['error']}", _WORKER,
                 {"error": (text, "the handler failed")}, BOOL),
    "crash": Kind(do_crash, lambda args: f"{args['worker']} claims and crashes", _WORKER,
                  expect=BATCH, shape=_batch_shape),
    "run": Kind(do_run, lambda args: f"{args['worker']} runs", _WORKER, _ANSWER, BATCH,
                _batch_shape, _answer_fields),
    "advance": Kind(do_advance, lambda args: f"clock advances {format_duration(args['by'])}",
                    {"by": duration}),
    "set_clock": Kind(do_set_clock, lambda args: "clock set", {"to": when}),
    "tick": Kind(do_tick, lambda args: "scheduler pass", expect=INT),
    "add_timer": Kind(
        do_add_timer,
        lambda args: f"{'replace' if args['replace'] else 'add'} timer {args['name']}",
        {"name": text},
        {"every": (duration, None), "start": (when, None), "due": (when, None),
         "cron": (cron, None), "tz": (zone, None),
         "payload": (json_object, "{}"), "catch_up": (choice(*CATCH_UP_MODES), "coalesce"),
         "replace": (flag, False)},
        Expect(one_of("added", "unchanged", "replaced", "error"),
               "added, unchanged, replaced or error"), check=_timer_fields),
    "remove_timer": Kind(do_remove_timer, lambda args: f"remove timer {args['name']}",
                         {"name": text}, expect=BOOL),
    "request": Kind(do_request, lambda args: f"request approval {args['id']}",
                    {"id": text, "expires_in": duration, "action": text}, expect=BOOL),
    "answer": Kind(do_answer, lambda args: f"answer {args['id']}: {args['reply']}",
                   {"id": text, "reply": choice("yes", "no")},
                   expect=Expect(one_of("yes", "no", "expired", "unknown"),
                                 "yes, no, expired or unknown")),
    "dispatch": Kind(do_dispatch, lambda args: f"dispatch, sender {args['sender']}", {},
                     {"sender": (choice(*SENDERS), "ok"),
                      "mode": (choice(*DELIVERY_MODES), None)},
                     Expect(lambda v: isinstance(v, str), "the body sent, wait or empty")),
    "resolve": Kind(
        do_resolve,
        lambda args: f"resolve {args['dispatch']} as {'sent' if args['sent'] else 'unsent'}",
        {"dispatch": text, "sent": flag}, expect=INT),
    "event": Kind(do_event, lambda args: f"{args['source']}/{args['id']}: status, attempts",
                  {"source": text, "id": text},
                  expect=Expect(lambda v: is_pair(v) or v == "none",
                                "[status, attempts] or \"none\"")),
    "payload": Kind(
        do_payload,
        lambda args: (f"newest {args['timer']} event" if args["timer"]
                      else f"{args['source']}/{args['id']}")
        + f": {args['field']}" + (f" ({args['unit']})" if args["unit"] else "")
        + (f" in {args['tz']}" if args["tz"] else ""),
        {"field": text},
        {"timer": (text, None), "source": (text, None), "id": (text, None),
         "unit": (choice(*UNITS), None), "tz": (zone, None)},
        Expect(lambda v: True, "any value"), check=_payload_fields),
    "count": Kind(do_count, lambda args: f"count {args['what']}", {"what": choice(*COUNTABLE)},
                  expect=INT),
    "next_due": Kind(do_next_due,
                     lambda args: (f"{args['timer']} next due, {args['tz']} time" if args["tz"]
                                   else f"{args['timer']} next due in ({args['unit']})"),
                     {"timer": text}, {"unit": (choice(*UNITS), "h"), "tz": (zone, None)},
                     Expect(lambda v: is_number(v) or isinstance(v, str),
                            "a number, a local time or \"none\"")),
    "sends": Kind(do_sends,
                  lambda args: "dispatch keys so far" if args["keys"] else "sends so far",
                  {}, {"keys": (flag, False)}, Expect(is_strings, "a list of strings")),
    "step": Kind(do_step, lambda args: f"{args['worker']} steps {args['key']}",
                 {"worker": text, "key": text},
                 {"end": (choice("done", "failed", "crash"), "done"),
                  "mode": (choice(*STEP_MODES), None)},
                 Expect(one_of("ran", "memo", "fenced", "uncertain", "failed", "died"),
                        "ran, memo, fenced, uncertain, failed or died")),
    "effects": Kind(do_effects, lambda args: "steps whose work ran", expect=Expect(
        is_strings, "a list of step keys")),
    "state": Kind(do_state, lambda args: "state: version, value", expect=Expect(
        lambda v: isinstance(v, list) and len(v) == 2 and is_int(v[0])
        and isinstance(v[1], dict), "[version, {state}]")),
    "lease": Kind(do_lease, lambda args: "lease holder, generation",
                  expect=Expect(lambda v: is_pair(v) or v == "none",
                                "[worker, generation] or \"none\"")),
}
