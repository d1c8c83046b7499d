"""Timers: which occurrences a due timer owes, and what each event says.

The scheduler turns due timers into inbox events, never into runs. A timer
repeats on a :class:`Schedule`: every N seconds, or a cron expression in a
time zone (:class:`agentbox.calendar.Cron`); :func:`owed` is the one rule
for both. Missed occurrences coalesce into one event carrying
``scheduled_for``, ``late_by`` and ``skipped``; with ``catch_up = each``
they become one event apiece, up to a bound after which the rest coalesce.
The event key is ``name@scheduled-time``, so a replayed pass stores nothing
twice.

Every due time is within the years 1970 to 9999 (:func:`agentbox.clock.check_time`):
a timer asked for outside them is refused, and a recurring timer whose next
occurrence would pass the end of 9999 is spent once its last one fires, as a
one-off is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from agentbox.clock import FIRST_TIME, check_time, within
from agentbox.errors import BadInput, NotAsAsked
from agentbox.jsonutil import canonical
from agentbox.rules.policy import Policy
from agentbox.rules.records import CATCH_UP_MODES, AddOutcome


class TimerSpec(NamedTuple):
    """A timer as asked for: by `schedule add`, an approval request or a run's answer."""

    name: str
    due: int
    every: int | None
    payload: str = "{}"
    catch_up: str = "coalesce"
    event_source: str | None = None
    event_id: str | None = None
    # Asked for by a run: may re-arm a one-off timer, never replace a schedule.
    follow_up: bool = False
    cron: str | None = None  # a calendar schedule: a cron expression ...
    tz: str | None = None  # ... read in this IANA time zone


class Timer(NamedTuple):
    name: str
    due: int
    every: int | None
    payload: str
    catch_up: str
    event_source: str | None
    event_id: str | None
    done: bool
    created_at: int
    cron: str | None = None
    tz: str | None = None

    @property
    def recurring(self) -> bool:
        return self.every is not None or self.cron is not None


MAX_NAME_LENGTH = 200
# Timers named so are approvals' expiries (rules.approvals.expiry_timer_name) and are made
# only by a request: a timer of one's own under such a name could replace a pending
# expiry, so that the request never comes back, or be taken over by a later request.
EXPIRY_PREFIX = "expire:"
# Keys the scheduler writes into every timer event; a payload may not carry them.
RESERVED_KEYS = ("timer", "scheduled_for", "late_by", "skipped")
SOURCE = "timer"


def check_catch_up(mode: str) -> None:
    if mode not in CATCH_UP_MODES:
        raise BadInput(f"a catch-up mode is one of {', '.join(CATCH_UP_MODES)}, not {mode!r}")


def check_spec(spec: TimerSpec) -> None:
    if not spec.name or len(spec.name) > MAX_NAME_LENGTH or "\x00" in spec.name:
        raise BadInput(f"a timer name is 1-{MAX_NAME_LENGTH} characters without NUL")
    if spec.name.startswith(EXPIRY_PREFIX) and spec.event_source is None:
        raise BadInput(f"timer names beginning {EXPIRY_PREFIX!r} are kept for approvals' "
                       "expiries")
    check_catch_up(spec.catch_up)
    check_time(spec.due, f"timer {spec.name!r} would be due at")
    if spec.every is not None:
        from agentbox.durations import check_seconds

        try:
            check_seconds(spec.every, spec.every)
        except BadInput:
            raise BadInput("a timer's interval must be a positive number of seconds, at "
                           "most a century") from None
    if (spec.cron is None) != (spec.tz is None):
        raise BadInput("a cron timer needs both an expression and a time zone")
    if spec.cron is not None and spec.tz is not None:
        from agentbox.calendar import check_cron, zone

        if spec.every is not None:
            raise BadInput("a timer repeats every so often or on a cron schedule, not both")
        check_cron(spec.cron)
        zone(spec.tz)
    if (spec.every is not None or spec.cron is not None) and spec.event_id is not None:
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
    schedule_same = (timer.every, timer.cron, timer.tz) == (spec.every, spec.cron, spec.tz) and (
        timer.due == spec.due or (timer.recurring and not exact))
    return (schedule_same and timer.payload == spec.payload and timer.catch_up == spec.catch_up
            and timer.event_source == spec.event_source and timer.event_id == spec.event_id)


def on_add(existing: Timer | None, spec: TimerSpec, replace: bool) -> AddOutcome:
    """What adding ``spec`` does to the timer of that name; raises when it may not.

    Without ``replace`` a live timer of the same name must be unchanged; a
    one-off that already fired is spent and may be re-added freely. A run's
    follow-up may re-arm a one-off timer but never replaces a schedule. (No
    timer but a request's own may take an approval's expiry's name: see
    :data:`EXPIRY_PREFIX`.)
    """
    check_spec(spec)
    if existing is not None and _same(existing, spec, exact=replace):
        return "unchanged"
    if existing is not None and spec.follow_up and existing.recurring:
        raise BadInput(f"a follow-up timer cannot replace timer {spec.name!r}: "
                       "it is a recurring schedule")
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


def cron_due(expr: str, tz: str, now: int) -> int:
    """When a cron timer added at ``now`` is first due: the expression's next match."""
    from agentbox.calendar import check_cron, next_after

    due = next_after(check_cron(expr), tz, now)
    if due is None:
        raise BadInput(f"cron expression {expr!r} never matches again before the year 10000")
    return due


class Schedule(Protocol):
    """When a recurring timer fires: every N seconds, or a cron expression in a zone."""

    def after(self, at: int) -> int | None:
        """The occurrence following ``at``, itself an occurrence; None if none follows."""
        ...

    def span(self, first: int, now: int) -> tuple[int, int, int | None]:
        """From the occurrence ``first`` (at or before ``now``): the latest occurrence
        up to ``now``, how many occurrences after ``first`` that is, and the next one."""
        ...


@dataclass(frozen=True)
class Every:
    """Every ``seconds``, up to the end of the year 9999."""

    seconds: int

    def after(self, at: int) -> int | None:
        following = at + self.seconds
        return following if within(following) else None

    def span(self, first: int, now: int) -> tuple[int, int, int | None]:
        missed = (now - first) // self.seconds
        latest = first + missed * self.seconds
        return latest, missed, self.after(latest)


def schedule(timer: Timer) -> Schedule | None:
    """The timer's schedule; None for a one-off."""
    if timer.cron is not None and timer.tz is not None:
        from agentbox.calendar import Cron

        return Cron(timer.cron, timer.tz)
    return None if timer.every is None else Every(timer.every)


@dataclass(frozen=True)
class Owed:
    """What one scheduler pass owes a due timer: events and the timer's next due time."""

    events: tuple[tuple[int, int], ...]  # (scheduled_for, skipped), oldest first
    next_due: int | None  # None: the timer is spent


def _take(repeats: Schedule, first: int, count: int) -> list[int]:
    """The first ``count`` occurrences from ``first`` on (all known to exist)."""
    taken = [first] if count > 0 else []
    while len(taken) < count:  # empty only when count is not positive
        following = repeats.after(taken[-1])
        if following is None:
            break
        taken.append(following)
    return taken


def owed(timer: Timer, now: int, policy: Policy) -> Owed:
    """The events a due timer (``timer.due <= now``) owes at ``now``, and its next due time.

    A one-off fires once and is spent. ``coalesce`` writes one event for the
    latest occurrence, ``skipped`` counting the earlier ones; ``each`` writes
    one event per occurrence, but past ``catch_up_limit`` the first
    ``limit - 1`` go alone and the rest coalesce into the latest. The last
    event is always the latest occurrence, and the next due time follows it.
    A due time before 1970, which only an older version could have stored,
    counts from the first second of 1970.
    """
    timer = timer._replace(due=max(timer.due, FIRST_TIME))
    repeats = schedule(timer)
    if repeats is None:
        return Owed(((timer.due, 0),), None)
    limit = max(1, policy.catch_up_limit)
    latest, missed, following = repeats.span(timer.due, now)
    if timer.catch_up == "coalesce" or missed == 0:
        events = [(latest, missed)]
    elif missed < limit:
        events = [(at, 0) for at in _take(repeats, timer.due, missed + 1)]
    else:
        alone = [(at, 0) for at in _take(repeats, timer.due, limit - 1)]
        events = [*alone, (latest, missed - (limit - 1))]
    return Owed(tuple(events), following)


def event_key(timer: Timer, at: int) -> tuple[str, str]:
    """The inbox key of the occurrence at ``at``: fixed for an approval's expiry."""
    return timer.event_source or SOURCE, timer.event_id or f"{timer.name}@{at}"


def event_body(timer: Timer, at: int, skipped: int, now: int) -> str:
    return canonical({**json.loads(timer.payload), "timer": timer.name, "scheduled_for": at,
                      "late_by": now - at, "skipped": skipped})
