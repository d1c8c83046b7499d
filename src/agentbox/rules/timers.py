"""Timers: which occurrences a due timer owes, and what each event says.

The scheduler turns due timers into inbox events, never into runs. Missed
occurrences coalesce into one event carrying ``scheduled_for``, ``late_by``
and ``skipped``; with ``catch_up = each`` they become one event apiece, up
to a bound after which the rest coalesce. The event key is
``name@scheduled-time``, so a replayed pass stores nothing twice.
"""

from __future__ import annotations

import json

from agentbox.errors import BadInput, NotAsAsked
from agentbox.jsonutil import canonical
from agentbox.rules.policy import Policy
from agentbox.rules.records import CATCH_UP_MODES, AddOutcome, Timer, TimerSpec

MAX_NAME_LENGTH = 200
# Keys the scheduler writes into every timer event; a payload may not carry them.
RESERVED_KEYS = ("timer", "scheduled_for", "late_by", "skipped")
SOURCE = "timer"


def check_spec(spec: TimerSpec) -> None:
    if not spec.name or len(spec.name) > MAX_NAME_LENGTH or "\x00" in spec.name:
        raise BadInput(f"a timer name is 1-{MAX_NAME_LENGTH} characters without NUL")
    if spec.catch_up not in CATCH_UP_MODES:
        raise BadInput(f"catch-up must be one of {', '.join(CATCH_UP_MODES)}")
    if spec.every is not None and spec.every <= 0:
        raise BadInput("a timer's interval must be a positive number of seconds")
    if spec.every is not None and spec.event_id is not None:
        raise BadInput("a recurring timer cannot use a fixed event key")
    taken = sorted(set(json.loads(spec.payload)) & set(RESERVED_KEYS))
    if taken:
        raise BadInput(f"a timer payload cannot use the key(s) {', '.join(taken)}: the "
                       "scheduler sets them on every event")


def _same(timer: Timer, spec: TimerSpec, exact: bool) -> bool:
    """Re-adding is a no-op when the schedule, payload and catch-up are unchanged.

    A recurring timer's next due time is not compared (it moves on as it
    fires), unless ``exact``: a replacement that names another due time is a
    change, which is how an operator re-arms an occurrence on purpose.
    """
    schedule_same = timer.every == spec.every and (
        timer.due == spec.due or (spec.every is not None and not exact))
    return (schedule_same and timer.payload == spec.payload and timer.catch_up == spec.catch_up
            and timer.event_source == spec.event_source and timer.event_id == spec.event_id)


def on_add(existing: Timer | None, spec: TimerSpec, replace: bool) -> AddOutcome:
    """What adding ``spec`` does to the timer of that name; raises when it may not.

    Without ``replace`` a live timer of the same name must be unchanged; a
    one-off that already fired is spent and may be re-added freely. A run's
    follow-up may re-arm a one-off timer but never replaces a schedule or an
    approval's expiry.
    """
    check_spec(spec)
    if existing is not None and _same(existing, spec, exact=replace):
        return "unchanged"
    if existing is not None and spec.follow_up and (existing.every is not None
                                                    or existing.event_source is not None):
        raise BadInput(f"a follow-up timer cannot replace timer {spec.name!r}: "
                       + ("it is a recurring schedule" if existing.every is not None
                          else "it is an approval's expiry"))
    live = existing is not None and not existing.done
    if live and not replace:
        raise NotAsAsked(f"timer {spec.name!r} exists with a different schedule or payload; "
                         "use --replace to change it")
    return "replaced" if live else "added"


def check_remove(timer: Timer) -> None:
    """An approval's pending expiry stays: without it an unanswered request never returns."""
    if timer.event_source is not None and not timer.done:
        raise NotAsAsked(f"timer {timer.name!r} is the expiry of {timer.event_source} "
                         f"{timer.event_id!r}; it goes when it fires")


def occurrences(timer: Timer, now: int, policy: Policy) -> list[tuple[int, int]]:
    """The (scheduled_for, skipped) events one pass emits for a due timer."""
    limit = max(1, policy.catch_up_limit)
    if timer.every is None:
        return [(timer.due, 0)]
    missed = (now - timer.due) // timer.every  # occurrences after the first due one
    latest = timer.due + missed * timer.every
    if timer.catch_up == "coalesce" or missed == 0:
        return [(latest, missed)]
    if missed + 1 <= limit:
        return [(timer.due + k * timer.every, 0) for k in range(missed + 1)]
    alone = [(timer.due + k * timer.every, 0) for k in range(limit - 1)]
    return [*alone, (latest, missed - (limit - 1))]


def next_due(timer: Timer, occurrences: list[tuple[int, int]]) -> int | None:
    """When the timer is due again after emitting ``occurrences``; None: a spent one-off."""
    if timer.every is None:
        return None
    return occurrences[-1][0] + timer.every  # the last occurrence is the latest one due


def event_key(timer: Timer, at: int) -> tuple[str, str]:
    """The inbox key of the occurrence at ``at``: fixed for an approval's expiry."""
    return timer.event_source or SOURCE, timer.event_id or f"{timer.name}@{at}"


def event_body(timer: Timer, at: int, skipped: int, now: int) -> str:
    return canonical({**json.loads(timer.payload), "timer": timer.name, "scheduled_for": at,
                      "late_by": now - at, "skipped": skipped})
