"""The timers table of one SQLite inbox and the scheduler pass over it.

A timer advances in the same transaction that inserts its event, so a second
pass finds nothing due; which occurrences a due timer owes, and the key and
body of each event, are decided in :mod:`agentbox.rules.timers`.
"""

from __future__ import annotations

import sqlite3

from agentbox.backends.sqlite import history, inbox
from agentbox.backends.sqlite.db import write
from agentbox.rules import timers as rules
from agentbox.rules.policy import Policy
from agentbox.rules.records import AddOutcome, Event
from agentbox.rules.timers import Timer, TimerSpec

_COLUMNS = ("name, due, every, payload, catch_up, event_source, event_id, done, created_at, "
            "cron, tz")


def _row(row: tuple[object, ...]) -> Timer:
    name, due, every, payload, catch_up, ev_source, ev_id, done, created, cron, tz = row
    return Timer(str(name), int(due), every, str(payload), str(catch_up),  # type: ignore[arg-type,call-overload]
                 ev_source, ev_id, bool(done), int(created), cron, tz)  # type: ignore[arg-type,call-overload]


def get(conn: sqlite3.Connection, name: str) -> Timer | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM timers WHERE name = ?", (name,)).fetchone()
    return _row(row) if row else None


def add_in(conn: sqlite3.Connection, spec: TimerSpec, now: int,
           replace: bool) -> AddOutcome:
    """Add a timer inside the caller's transaction, as :func:`rules.on_add` allows."""
    outcome = rules.on_add(get(conn, spec.name), spec, replace)
    if outcome == "unchanged":
        return outcome
    conn.execute(
        f"""INSERT OR REPLACE INTO timers ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)""",
        (spec.name, spec.due, spec.every, spec.payload, spec.catch_up, spec.event_source,
         spec.event_id, now, spec.cron, spec.tz))
    history.record(conn, now, "timer", spec.name, outcome, detail=f"due {spec.due}")
    return outcome


def add(conn: sqlite3.Connection, spec: TimerSpec, now: int,
        replace: bool = False) -> AddOutcome:
    with write(conn):
        return add_in(conn, spec, now, replace)


def remove(conn: sqlite3.Connection, name: str, now: int) -> bool:
    """Delete a timer; False if there is none by that name."""
    with write(conn):
        timer = get(conn, name)
        if timer is None:
            return False
        rules.check_remove(timer)
        conn.execute("DELETE FROM timers WHERE name = ?", (name,))
        history.record(conn, now, "timer", name, "removed")
        return True


def listing(conn: sqlite3.Connection, include_done: bool) -> list[Timer]:
    where = "" if include_done else "WHERE done = 0"
    rows = conn.execute(f"SELECT {_COLUMNS} FROM timers {where} ORDER BY due, name")
    return [_row(r) for r in rows.fetchall()]


def next_due(conn: sqlite3.Connection) -> Timer | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM timers WHERE done = 0 ORDER BY due LIMIT 1").fetchone()
    return _row(row) if row else None


def events(conn: sqlite3.Connection, name: str) -> list[Event]:
    """The events a timer has put into the inbox (keyed ``NAME@time``), oldest first."""
    return inbox.with_key_prefix(conn, rules.SOURCE, f"{name}@")


def tick(conn: sqlite3.Connection, now: int, policy: Policy | None = None) -> int:
    """One scheduler pass; returns how many due timers it handled."""
    policy = policy or Policy()
    with write(conn):
        due = [_row(r) for r in conn.execute(
            f"SELECT {_COLUMNS} FROM timers WHERE done = 0 AND due <= ? ORDER BY due, name",
            (now,)).fetchall()]
        for timer in due:
            owed = rules.owed(timer, now, policy)
            for at, skipped in owed.events:
                source, source_id = rules.event_key(timer, at)
                stored = inbox.store_in(conn, source, source_id,
                                        rules.event_body(timer, at, skipped, now), now,
                                        record_conflict=False)
                history.record(conn, now, "timer", timer.name, "fired",
                               detail=f"scheduled for {at}, skipped {skipped}: event "
                                      f"{stored.id} {stored.outcome}")
            if owed.next_due is None:
                conn.execute("UPDATE timers SET done = 1 WHERE name = ?", (timer.name,))
            else:
                conn.execute("UPDATE timers SET due = ? WHERE name = ?",
                             (owed.next_due, timer.name))
        return len(due)
