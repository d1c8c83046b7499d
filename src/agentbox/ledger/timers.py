"""Timers and the scheduler pass over them.

A timer advances in the same transaction that stores its event, under the
inbox's lock, so a second pass (in any process, on any host) finds nothing
due; which occurrences a due timer owes, and the key and body of each event,
are decided in :mod:`agentbox.rules.timers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbox.ledger import history
from agentbox.ledger.core import Core
from agentbox.ledger.inbox import store_in, with_key_prefix
from agentbox.rules.policy import Policy
from agentbox.rules.records import AddOutcome, Event

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader, Tx
    from agentbox.rules.timers import Timer, TimerSpec

_COLUMNS = ("name, due, every, payload, catch_up, event_source, event_id, done, created_at, "
            "cron, tz")


def _timer(row: tuple[Any, ...]) -> Timer:
    from agentbox.rules.timers import Timer

    name, due, every, payload, catch_up, source, event_id, done, created, cron, tz = row
    return Timer(str(name), int(due), None if every is None else int(every), str(payload),
                 str(catch_up), source, event_id, bool(done), int(created), cron, tz)


def _select(reader: Reader, where: str, **params: Any) -> list[Timer]:
    return [_timer(row) for row in reader.rows(
        f"SELECT {_COLUMNS} FROM timers WHERE inbox_id = :box {where}", **params)]


def _get(reader: Reader, name: str) -> Timer | None:
    found = _select(reader, "AND name = :name", name=name)
    return found[0] if found else None


def next_due(reader: Reader) -> Timer | None:
    found = _select(reader, "AND NOT done ORDER BY due, name LIMIT 1")
    return found[0] if found else None


def add_in(tx: Tx, spec: TimerSpec, now: int, replace: bool) -> AddOutcome:
    """Add a timer inside the caller's transaction, as :func:`rules.on_add` allows."""
    from agentbox.rules import timers as rules

    existing = _get(tx, spec.name)
    outcome = rules.on_add(existing, spec, replace)
    if outcome == "unchanged":
        return outcome
    values = {"name": spec.name, "due": spec.due, "every": spec.every, "payload": spec.payload,
              "catch_up": spec.catch_up, "event_source": spec.event_source,
              "event_id": spec.event_id, "now": now, "cron": spec.cron, "tz": spec.tz}
    if existing is None:
        tx.run(f"""INSERT INTO timers (inbox_id, {_COLUMNS})
                   VALUES (:box, :name, :due, :every, :payload, :catch_up, :event_source,
                           :event_id, FALSE, :now, :cron, :tz)""", **values)
    else:
        tx.run("""UPDATE timers SET due = :due, every = :every, payload = :payload,
                      catch_up = :catch_up, event_source = :event_source, event_id = :event_id,
                      done = FALSE, created_at = :now, cron = :cron, tz = :tz
                  WHERE inbox_id = :box AND name = :name""", **values)
    history.record(tx, now, "timer", spec.name, outcome, detail=f"due {spec.due}")
    return outcome


# A timer that a scheduler pass fires at ``:now``.
DUE = "NOT done AND due <= :now"


def _due(reader: Reader, now: int) -> list[Timer]:
    return _select(reader, f"AND {DUE} ORDER BY due, name", now=now)


class Timers(Core):
    """Timers: added, removed, listed, and turned into events when due."""

    def add_timer(self, spec: TimerSpec, now: int, replace: bool = False) -> AddOutcome:
        """Add a timer; re-adding an unchanged one is a no-op, a changed one needs
        ``replace`` (else NotAsAsked)."""
        with self._locked() as (tx, _):
            return add_in(tx, spec, now, replace)

    def remove_timer(self, name: str, now: int) -> bool:
        """Delete a timer; False if there is none. An approval's expiry is refused."""
        from agentbox.rules import timers as rules

        with self._locked() as (tx, _):
            timer = _get(tx, name)
            if timer is None:
                return False
            rules.check_remove(timer)
            tx.run("DELETE FROM timers WHERE inbox_id = :box AND name = :name", name=name)
            history.record(tx, now, "timer", name, "removed")
            return True

    def timers(self, include_done: bool = False) -> list[Timer]:
        """Timers by due time; spent one-offs only with ``include_done``."""
        return _select(self._read(), ("" if include_done else "AND NOT done")
                       + " ORDER BY due, name")

    def timer_events(self, name: str) -> list[Event]:
        """The events a timer has put into the inbox (keyed ``NAME@time``), oldest first."""
        from agentbox.rules.timers import SOURCE

        return with_key_prefix(self._read(), SOURCE, f"{name}@")

    def tick(self, now: int, policy: Policy | None = None) -> int:
        """One scheduler pass: each due timer's events stored and the timer moved on,
        in one transaction. Returns how many timers were due.

        A pass with nothing due only reads: the inbox's lock is taken only when
        there is work, and what is due is read again under it.
        """
        if not _due(self._read(), now):
            return 0
        return self._fire(now, policy or Policy())

    def _fire(self, now: int, policy: Policy) -> int:
        """The scheduler pass's transaction, once a read found a timer due: what is due
        is read again under the inbox's lock."""
        from agentbox.rules import timers as rules

        with self._locked() as (tx, _):
            due = _due(tx, now)
            for timer in due:
                owed = rules.owed(timer, now, policy)
                for at, skipped in owed.events:
                    source, source_id = rules.event_key(timer, at)
                    stored = store_in(self.engine, tx, source, source_id,
                                      rules.event_body(timer, at, skipped, now), now,
                                      record_conflict=False)
                    history.record(tx, now, "timer", timer.name, "fired",
                                   detail=f"scheduled for {at}, skipped {skipped}: event "
                                          f"{stored.id} {stored.outcome}")
                if owed.next_due is None:
                    tx.run("UPDATE timers SET done = TRUE WHERE inbox_id = :box AND name = :name",
                           name=timer.name)
                else:
                    tx.run("UPDATE timers SET due = :due WHERE inbox_id = :box AND name = :name",
                           due=owed.next_due, name=timer.name)
            return len(due)
