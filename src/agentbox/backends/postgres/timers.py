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
from agentbox.backends.postgres.db import Box, Tx
from agentbox.backends.postgres.lease import locked
from agentbox.rules import timers as rules
from agentbox.rules.policy import Policy
from agentbox.rules.records import AddOutcome, Event
from agentbox.rules.timers import Timer, TimerSpec

_COLUMNS = ("name, due, every, payload, catch_up, event_source, event_id, done, created_at, "
            "cron, tz")


def _select(box: Box, where: str, params: tuple[Any, ...] = ()) -> list[Timer]:
    rows = box.read(f"SELECT {_COLUMNS} FROM timers WHERE inbox_id = %s {where}",
                    (box.id, *params)).fetchall()
    return [Timer(*row) for row in rows]


def get(box: Box, name: str) -> Timer | None:
    found = _select(box, "AND name = %s", (name,))
    return found[0] if found else None


def add_in(tx: Tx, spec: TimerSpec, now: int, replace: bool) -> AddOutcome:
    """Add a timer inside the caller's transaction, as :func:`rules.on_add` allows."""
    outcome = rules.on_add(get(tx, spec.name), spec, replace)
    if outcome == "unchanged":
        return outcome
    tx.write(
        f"""INSERT INTO timers (inbox_id, {_COLUMNS})
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, false, %s, %s, %s)
            ON CONFLICT (inbox_id, name) DO UPDATE SET (due, every, payload, catch_up,
                event_source, event_id, done, created_at, cron, tz) = (excluded.due,
                excluded.every, excluded.payload, excluded.catch_up, excluded.event_source,
                excluded.event_id, excluded.done, excluded.created_at, excluded.cron,
                excluded.tz)""",
        (tx.id, spec.name, spec.due, spec.every, spec.payload, spec.catch_up,
         spec.event_source, spec.event_id, now, spec.cron, spec.tz))
    history.record(tx, now, "timer", spec.name, outcome, detail=f"due {spec.due}")
    return outcome


def add(conn: Connection[Any], box_id: int, spec: TimerSpec, now: int,
        replace: bool) -> AddOutcome:
    with locked(conn, box_id) as (tx, _):
        return add_in(tx, spec, now, replace)


def remove(conn: Connection[Any], box_id: int, name: str, now: int) -> bool:
    """Delete a timer; False if there is none by that name."""
    with locked(conn, box_id) as (tx, _):
        timer = get(tx, name)
        if timer is None:
            return False
        rules.check_remove(timer)
        tx.write("DELETE FROM timers WHERE inbox_id = %s AND name = %s", (box_id, name))
        history.record(tx, now, "timer", name, "removed")
        return True


def listing(box: Box, include_done: bool) -> list[Timer]:
    return _select(box, ("" if include_done else "AND NOT done") + " ORDER BY due, name")


def next_due(box: Box) -> Timer | None:
    found = _select(box, "AND NOT done ORDER BY due, name LIMIT 1")
    return found[0] if found else None


def events(box: Box, name: str) -> list[Event]:
    """The events a timer has put into the inbox (keyed ``NAME@time``), oldest first."""
    return inbox.with_key_prefix(box, rules.SOURCE, f"{name}@")


def _due(box: Box, now: int) -> list[Timer]:
    return _select(box, "AND NOT done AND due <= %s ORDER BY due, name", (now,))


def tick(conn: Connection[Any], box_id: int, now: int, policy: Policy | None = None) -> int:
    """One scheduler pass; returns how many due timers it handled.

    A pass with nothing due reads and leaves: only one with work takes the
    inbox lock, and reads what is due again under it.
    """
    policy = policy or Policy()
    if not _due(Box(conn, box_id), now):
        return 0
    with locked(conn, box_id) as (tx, _):
        due = _due(tx, now)
        for timer in due:
            owed = rules.owed(timer, now, policy)
            for at, skipped in owed.events:
                source, source_id = rules.event_key(timer, at)
                stored = inbox.store_in(tx, source, source_id,
                                        rules.event_body(timer, at, skipped, now), now,
                                        record_conflict=False)
                history.record(tx, now, "timer", timer.name, "fired",
                               detail=f"scheduled for {at}, skipped {skipped}: event "
                                      f"{stored.id} {stored.outcome}")
            if owed.next_due is None:
                tx.write("UPDATE timers SET done = true WHERE inbox_id = %s AND name = %s",
                         (box_id, timer.name))
            else:
                tx.write("UPDATE timers SET due = %s WHERE inbox_id = %s AND name = %s",
                         (owed.next_due, box_id, timer.name))
        return len(due)
