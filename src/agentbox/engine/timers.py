"""Timers: the scheduler turns due timers into inbox events, never into runs.

A timer advances in the same transaction that inserts its event, so a second
pass finds nothing due; the event key ``name@scheduled-time`` catches the
replays a transaction cannot see (a re-registered schedule). Missed
occurrences coalesce into one event carrying ``scheduled_for``, ``late_by``
and ``skipped``, or, with ``catch_up = each``, become one event apiece up to
a bound after which the rest coalesce.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Literal

from agentbox.engine import history, inbox
from agentbox.engine.answer import TimerSpec
from agentbox.engine.db import write
from agentbox.engine.policy import Policy
from agentbox.errors import BadInput, NotAsAsked
from agentbox.jsonutil import canonical

CATCH_UP_MODES = ("coalesce", "each")
MAX_NAME_LENGTH = 200
# Keys the scheduler writes into every timer event; a payload may not carry them.
RESERVED_KEYS = ("timer", "scheduled_for", "late_by", "skipped")

AddOutcome = Literal["added", "unchanged", "replaced"]


@dataclass(frozen=True)
class Timer:
    name: str
    due: int
    every: int | None
    payload: str
    catch_up: str
    event_source: str | None
    event_id: str | None
    done: bool
    created_at: int


_COLUMNS = "name, due, every, payload, catch_up, event_source, event_id, done, created_at"


def _row(row: tuple[object, ...]) -> Timer:
    name, due, every, payload, catch_up, ev_source, ev_id, done, created = row
    return Timer(str(name), int(due), every, str(payload), str(catch_up),  # type: ignore[arg-type,call-overload]
                 ev_source, ev_id, bool(done), int(created))  # type: ignore[arg-type,call-overload]


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


def get(conn: sqlite3.Connection, name: str) -> Timer | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM timers WHERE name = ?", (name,)).fetchone()
    return _row(row) if row else None


def add_in(conn: sqlite3.Connection, spec: TimerSpec, now: int,
           replace: bool = False) -> AddOutcome:
    """Add a timer inside the caller's transaction.

    Without ``replace`` a live timer of the same name must be unchanged; a
    one-off that already fired is spent and may be re-added freely. A run's
    follow-up may re-arm a one-off timer but never replaces a schedule or an
    approval's expiry.
    """
    check_spec(spec)
    existing = get(conn, spec.name)
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
    conn.execute(
        f"""INSERT OR REPLACE INTO timers ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)""",
        (spec.name, spec.due, spec.every, spec.payload, spec.catch_up, spec.event_source,
         spec.event_id, now))
    outcome: AddOutcome = "replaced" if live else "added"
    history.record(conn, now, "timer", spec.name, outcome, detail=f"due {spec.due}")
    return outcome


def add(conn: sqlite3.Connection, spec: TimerSpec, now: int,
        replace: bool = False) -> AddOutcome:
    with write(conn):
        return add_in(conn, spec, now, replace)


def remove(conn: sqlite3.Connection, name: str, now: int) -> bool:
    """Delete a timer; False if there is none by that name.

    An approval's pending expiry is refused: without it a request nobody
    answers would never come back to the agent.
    """
    with write(conn):
        timer = get(conn, name)
        if timer is None:
            return False
        if timer.event_source is not None and not timer.done:
            raise NotAsAsked(f"timer {name!r} is the expiry of {timer.event_source} "
                             f"{timer.event_id!r}; it goes when it fires")
        conn.execute("DELETE FROM timers WHERE name = ?", (name,))
        history.record(conn, now, "timer", name, "removed")
        return True


def listing(conn: sqlite3.Connection, include_done: bool = False) -> list[Timer]:
    where = "" if include_done else "WHERE done = 0"
    rows = conn.execute(f"SELECT {_COLUMNS} FROM timers {where} ORDER BY due, name")
    return [_row(r) for r in rows.fetchall()]


def next_due(conn: sqlite3.Connection) -> Timer | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM timers WHERE done = 0 ORDER BY due LIMIT 1").fetchone()
    return _row(row) if row else None


def events(conn: sqlite3.Connection, name: str) -> list[inbox.Event]:
    """The events a timer has put into the inbox (keyed ``NAME@time``), oldest first."""
    return inbox.with_key_prefix(conn, "timer", f"{name}@")


def _occurrences(timer: Timer, now: int, limit: int) -> list[tuple[int, int]]:
    """The (scheduled_for, skipped) events one pass emits for a due timer."""
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


def tick(conn: sqlite3.Connection, now: int, policy: Policy | None = None) -> int:
    """One scheduler pass; returns how many due timers it handled."""
    limit = max(1, (policy or Policy()).catch_up_limit)
    with write(conn):
        due = [_row(r) for r in conn.execute(
            f"SELECT {_COLUMNS} FROM timers WHERE done = 0 AND due <= ? ORDER BY due, name",
            (now,)).fetchall()]
        for timer in due:
            base = json.loads(timer.payload)
            occurrences = _occurrences(timer, now, limit)
            for at, skipped in occurrences:
                body = {**base, "timer": timer.name, "scheduled_for": at,
                        "late_by": now - at, "skipped": skipped}
                stored = inbox.store_in(conn, timer.event_source or "timer",
                                        timer.event_id or f"{timer.name}@{at}",
                                        canonical(body), now, record_conflict=False)
                history.record(conn, now, "timer", timer.name, "fired",
                               detail=f"scheduled for {at}, skipped {skipped}: event "
                                      f"{stored.id} {stored.outcome}")
            if timer.every is None:
                conn.execute("UPDATE timers SET done = 1 WHERE name = ?", (timer.name,))
            else:  # the last occurrence is always the latest one due
                conn.execute("UPDATE timers SET due = ? WHERE name = ?",
                             (occurrences[-1][0] + timer.every, timer.name))
        return len(due)
