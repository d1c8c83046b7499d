"""Helpers written against the Store protocol alone, for tests on any backend.

``run`` and ``say`` make whole runs; ``StepWorker`` drives one worker call by
call, as the article tells it; ``store_snapshot`` is all a caller can see.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.policy import Policy
from agentbox.rules.records import OUTBOX_STATES, Event, IngestResult
from support.clock import T0, TTL

POLICY = Policy(lease_ttl=TTL, max_attempts=3)  # the article's: a 120 s lease, three attempts


def store_snapshot(store: Store, ids: Sequence[int] = ()) -> dict[str, Any]:
    """All a caller can see through the interface; equal snapshots = nothing changed."""
    events = {i: store.event(i) for i in ids}
    return {
        "status": store.status(),
        "events": events,
        "stories": {i: store.story(i) for i in ids},
        "dead": store.dead(),
        "outbox": store.outbox(OUTBOX_STATES),
        "timers": store.timers(include_done=True),
        "approvals": store.approvals(T0),
    }


def run(store: Store, holder: str, now: int, answer: Answer | None = None,
        policy: Policy = POLICY) -> tuple[int, list[Event]]:
    """One whole run: acquire, claim, finish, release. Returns (generation, batch)."""
    generation = store.acquire(holder, now, policy.lease_ttl)
    assert generation is not None
    batch = store.claim(holder, generation, now, policy)
    assert batch is not None
    assert store.finish(holder, generation, now, [e.id for e in batch], answer)
    assert store.release(holder, generation, now)
    return generation, batch


def say(store: Store, now: int, *bodies: str, urgent: bool = False) -> None:
    """Queue messages the only way there is: as the answer of a finished run."""
    run(store, f"speaker-{now}-{len(bodies)}", now,
        Answer(messages=tuple(Message(b, urgent) for b in bodies)))


def outbox_states(store: Store) -> list[str]:
    """The state of every outbox message, oldest first."""
    return [m.state for m in store.outbox(OUTBOX_STATES)]


def event_state(store: Store, source_id: str, source: str = "chat") -> tuple[str, int]:
    """(status, attempts) of one event, as the article prints it."""
    event = store.find(source, source_id)
    assert event is not None, source_id
    return event.status, event.attempts


def actions(store: Store, event_id: int) -> list[str]:
    """The actions of an event's story, in order."""
    return [entry.action for entry in store.story(event_id)]


@dataclass
class StepWorker:
    """One worker process driven call by call: a holder name, the generation it holds,
    what it claimed. (The worker `agentbox run` uses is :class:`agentbox.worker.Worker`.)"""

    store: Store
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


MakeStepWorker = Callable[..., StepWorker]  # the engine folder's `worker` fixture


def plant(store: Store, source: str, source_id: str, payload: str, now: int) -> IngestResult:
    """Store an event as no delivery may: under a source agentbox keeps for itself, or
    with a payload that is no JSON object. An older agentbox or a hand-edited file can
    leave such an event; the tests of how one is read plant it so."""
    from agentbox.ledger.inbox import store_in

    with store._write() as tx:
        return store_in(store.engine, tx, source, source_id, payload, now)


def unsign_state(store: Store) -> None:
    """Empty the generation of every state version, as no run or operator can (each
    writes its own): what a file edited by hand may hold."""
    with store._write() as tx:
        tx.run("UPDATE state_versions SET generation = NULL WHERE inbox_id = :box")


def steal_lease(store: Store) -> None:
    """Hand the lease to another holder behind its holder's back, as no worker can (a
    takeover waits for the lease to end): what a worker that lost its lease sees."""
    with store._write() as tx:
        tx.run("""UPDATE inboxes SET lease_holder = 'thief',
                      lease_generation = lease_generation + 1 WHERE id = :box""")


def every_row(store: Store) -> object:
    """Every row the inbox holds, read from its tables (on PostgreSQL the inbox's own
    rows and the schema's): two equal readings mean nothing changed."""
    from agentbox.location import is_url

    if is_url(store.location):
        from support.postgres import dump as pg_dump

        return pg_dump(store)
    from support.sqlite import dump as file_dump

    return file_dump(store.engine.conn)  # type: ignore[attr-defined]


def users_at(place: str) -> list[str]:
    """The users with an inbox at the test's ``place`` (see the ``place`` fixture), read
    without making anything."""
    from pathlib import Path

    from agentbox.location import is_url

    if is_url(place):
        from support.postgres import schema_rows

        rows = schema_rows(place)
        names = rows.get("inboxes", []) if rows else []
        return sorted(json.loads(str(row))["name"] for row in names)  # type: ignore[union-attr]
    folder = Path(place)
    return sorted(p.stem for p in folder.glob("*.sqlite3")) if folder.is_dir() else []


def break_inbox(place: str, user: str) -> None:
    """Leave ``user``'s inbox at ``place`` unreadable, as damage would: its file
    overwritten with junk, or on PostgreSQL the schema's events table gone (every
    inbox of the schema with it). Every store of it must be closed first."""
    from pathlib import Path

    from agentbox.location import is_url

    if is_url(place):
        import psycopg

        from agentbox.backends.postgres.url import parse

        target = parse(place)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{target.schema}".events RENAME TO events_gone')
        return
    path = Path(place) / f"{user}.sqlite3"
    for side in ("-wal", "-shm"):
        Path(f"{path}{side}").unlink(missing_ok=True)
    path.write_bytes(b"not an inbox\n" * 512)


def place_snapshot(place: str) -> object:
    """All there is at ``place``: its files (name, mode and digest of each), or every row
    of its schema (None while there is none). Equal snapshots mean nothing changed."""
    from pathlib import Path

    from agentbox.location import is_url

    if is_url(place):
        from support.postgres import schema_rows

        return schema_rows(place)
    import hashlib

    root = Path(place)
    return {str(p.relative_to(root)): (p.lstat().st_mode,
                                       hashlib.sha256(p.read_bytes()).hexdigest()
                                       if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))} if root.exists() else None


def cli_inbox(home: Path, user: str = "alice") -> Store:
    """A user's inbox where the CLI, run in this test's environment, finds it: the
    schema AGENTBOX_DB names on PostgreSQL, else the user's file under ``home``."""
    import os

    from agentbox.location import open_store

    url = os.environ.get("AGENTBOX_DB")
    if url:
        return open_store(url, user)
    return open_store(home / "inboxes" / f"{user}.sqlite3", user, make_folders=True)


@contextmanager
def schema_before(backend_name: str, version: dict[str, int],
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inside, an inbox is made (or brought up to date) only up to ``version`` of its
    backend, as the code of that time left it; the next open outside migrates it."""
    from agentbox.backends.postgres import db as pg_db
    from agentbox.backends.postgres import schema as pg_schema
    from agentbox.backends.sqlite import db as sqlite_db
    from agentbox.backends.sqlite import schema as sqlite_schema

    module, schema = ((sqlite_db, sqlite_schema) if backend_name == "sqlite"
                      else (pg_db, pg_schema))
    old = schema.MIGRATIONS[:version[backend_name]]
    with monkeypatch.context() as before:
        before.setattr(module, "MIGRATIONS", old)
        before.setattr(module, "SCHEMA_VERSION", len(old))
        yield
