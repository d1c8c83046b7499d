"""The timers of one inbox and the scheduler pass over them.

A timer advances in the same transaction that inserts its event, under the
inbox lock, so a second pass (on any host) finds nothing due; which
occurrences a due timer owes, and the key and body of each event, are
decided in :mod:`agentbox.rules.timers`.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from agentbox.backends.postgres import history, inbox
from agentbox.backends.postgres.lease import locked
from agentbox.rules import timers as rules
from agentbox.rules.policy import Policy
from agentbox.rules.records import AddOutcome, Event, Timer, TimerSpec

_COLUMNS = "name, due, every, payload, catch_up, event_source, event_id, done, created_at"


def _row(row: tuple[Any, ...]) -> Timer:
    return Timer(*row)


def get(conn: Connection[Any], box: int, name: str) -> Timer | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM timers WHERE inbox_id = %s AND name = %s",
                       (box, name)).fetchone()
    return _row(row) if row else None


def add_in(conn: Connection[Any], box: int, spec: TimerSpec, now: int,
           replace: bool = False) -> AddOutcome:
    """Add a timer inside the caller's transaction, as :func:`rules.on_add` allows."""
    outcome = rules.on_add(get(conn, box, spec.name), spec, replace)
    if outcome == "unchanged":
        return outcome
    conn.execute(
        f"""INSERT INTO timers (inbox_id, {_COLUMNS})
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false, %s)
            ON CONFLICT (inbox_id, name) DO UPDATE SET (due, every, payload, catch_up,
                event_source, event_id, done, created_at) = (excluded.due, excluded.every,
                excluded.payload, excluded.catch_up, excluded.event_source, excluded.event_id,
                excluded.done, excluded.created_at)""",
        (box, spec.name, spec.due, spec.every, spec.payload, spec.catch_up, spec.event_source,
         spec.event_id, now))
    history.record(conn, box, now, "timer", spec.name, outcome, detail=f"due {spec.due}")
    return outcome


def add(conn: Connection[Any], box: int, spec: TimerSpec, now: int,
        replace: bool = False) -> AddOutcome:
    with locked(conn, box):
        return add_in(conn, box, spec, now, replace)


def remove(conn: Connection[Any], box: int, name: str, now: int) -> bool:
    """Delete a timer; False if there is none by that name."""
    with locked(conn, box):
        timer = get(conn, box, name)
        if timer is None:
            return False
        rules.check_remove(timer)
        conn.execute("DELETE FROM timers WHERE inbox_id = %s AND name = %s", (box, name))
        history.record(conn, box, now, "timer", name, "removed")
        return True


def listing(conn: Connection[Any], box: int, include_done: bool = False) -> list[Timer]:
    where = "" if include_done else "AND NOT done"
    rows = conn.execute(f"SELECT {_COLUMNS} FROM timers WHERE inbox_id = %s {where} "
                        "ORDER BY due, name", (box,))
    return [_row(r) for r in rows.fetchall()]


def next_due(conn: Connection[Any], box: int) -> Timer | None:
    row = conn.execute(f"""SELECT {_COLUMNS} FROM timers WHERE inbox_id = %s AND NOT done
                           ORDER BY due, name LIMIT 1""", (box,)).fetchone()
    return _row(row) if row else None


def events(conn: Connection[Any], box: int, name: str) -> list[Event]:
    """The events a timer has put into the inbox (keyed ``NAME@time``), oldest first."""
    return inbox.with_key_prefix(conn, box, rules.SOURCE, f"{name}@")


def _due(conn: Connection[Any], box: int, now: int) -> list[Timer]:
    rows = conn.execute(f"""SELECT {_COLUMNS} FROM timers
                            WHERE inbox_id = %s AND NOT done AND due <= %s
                            ORDER BY due, name""", (box, now)).fetchall()
    return [_row(r) for r in rows]


def tick(conn: Connection[Any], box: int, now: int, policy: Policy | None = None) -> int:
    """One scheduler pass; returns how many due timers it handled.

    A pass with nothing due reads and leaves: only one with work takes the
    inbox lock, and reads what is due again under it.
    """
    policy = policy or Policy()
    if not _due(conn, box, now):
        return 0
    with locked(conn, box):
        due = _due(conn, box, now)
        for timer in due:
            owed = rules.occurrences(timer, now, policy)
            for at, skipped in owed:
                source, source_id = rules.event_key(timer, at)
                stored = inbox.store_in(conn, box, source, source_id,
                                        rules.event_body(timer, at, skipped, now), now,
                                        record_conflict=False)
                history.record(conn, box, now, "timer", timer.name, "fired",
                               detail=f"scheduled for {at}, skipped {skipped}: event "
                                      f"{stored.id} {stored.outcome}")
            following = rules.next_due(timer, owed)
            if following is None:
                conn.execute("UPDATE timers SET done = true WHERE inbox_id = %s AND name = %s",
                             (box, timer.name))
            else:
                conn.execute("UPDATE timers SET due = %s WHERE inbox_id = %s AND name = %s",
                             (following, box, timer.name))
        return len(due)
