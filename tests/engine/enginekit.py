"""Shared tools for engine tests: the article's clock, table dumps and real counts.

Everything runs against a simulated clock: ``now`` is an argument, nothing sleeps.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentbox.backends.sqlite.store import SqliteStore
from agentbox.rules.answer import Answer
from agentbox.rules.policy import Policy
from agentbox.rules.records import Event

T = 1_000_000  # the article's simulated clock starts here
TTL = 120      # the article's lease
POLICY = Policy(lease_ttl=TTL, max_attempts=3)

Dump = dict[str, list[tuple[object, ...]]]

EVENT_STATES = ("pending", "running", "done", "dead")
OUTBOX_STATES = ("held", "sending", "sent", "uncertain")


def dump(conn: sqlite3.Connection) -> Dump:
    """Every row of every table, so two dumps compare the whole database."""
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").fetchall()]
    return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr)
            for t in tables}


def real_counts(conn: sqlite3.Connection, table: str, column: str,
                states: Sequence[str]) -> dict[str, int]:
    """Counts by state from a real GROUP BY, zero included."""
    found = dict(conn.execute(
        f"SELECT {column}, COUNT(*) FROM {table} GROUP BY {column}").fetchall())
    assert set(found) <= set(states), found
    return {s: int(found.get(s, 0)) for s in states}


def assert_counts_true(store: SqliteStore) -> None:
    """The trigger-kept counts equal a GROUP BY over the rows themselves."""
    status = store.status()
    assert status.events == real_counts(store.conn, "events", "status", EVENT_STATES)
    assert status.outbox == real_counts(store.conn, "outbox", "state", OUTBOX_STATES)


def state(store: SqliteStore, source_id: str, source: str = "chat") -> tuple[str, int]:
    """(status, attempts) of one event, as the article prints it."""
    event = store.find(source, source_id)
    assert event is not None, source_id
    return event.status, event.attempts


def actions(store: SqliteStore, event_id: int) -> list[str]:
    return [entry.action for entry in store.story(event_id)]


@dataclass
class Worker:
    """One worker process: a holder name, the generation it holds, what it claimed."""

    store: SqliteStore
    holder: str
    policy: Policy = POLICY
    generation: int | None = None
    batch: list[Event] = field(default_factory=list)

    def acquire(self, now: int) -> int | None:
        self.generation = self.store.acquire(self.holder, now, self.policy.lease_ttl)
        return self.generation

    def claim(self, now: int) -> list[Event] | None:
        assert self.generation is not None
        got = self.store.claim(self.holder, self.generation, now, self.policy)
        self.batch = got or []
        return got

    def finish(self, now: int, answer: Answer | None = None) -> bool:
        assert self.generation is not None
        return self.store.finish(self.holder, self.generation, now,
                                 [e.id for e in self.batch], answer)

    def fail(self, now: int, error: str = "boom") -> bool:
        assert self.generation is not None
        return self.store.fail(self.holder, self.generation, now,
                               [e.id for e in self.batch], error, self.policy)

    def run(self, now: int, answer: Answer | None = None) -> list[Event]:
        """The article's run(): take the lease, claim, finish."""
        assert self.acquire(now) is not None
        got = self.claim(now)
        assert got is not None
        assert self.finish(now, answer)
        return got

    def ids(self) -> list[str]:
        return [e.source_id for e in self.batch]
