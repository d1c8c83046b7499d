"""The event inbox: ingest once, claim in batches, finish behind the fence.

Rules 1-4 of DESIGN.md live here: a UNIQUE (source, source_id) key refuses
the second copy of a delivery; attempts are counted when a row is claimed, so
a worker that crashes still uses one up; rows left running by an older
generation return to pending; a pending row out of attempts goes dead; a
retried row is claimed alone so a poison event cannot drag healthy ones down.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from agentbox.engine import history, lease
from agentbox.engine.db import write
from agentbox.errors import BadInput

if TYPE_CHECKING:
    from agentbox.engine.answer import Answer
    from agentbox.engine.policy import Policy

MAX_KEY_LENGTH = 512
INGEST_CHUNK = 1000  # rows per transaction in bulk ingest

Outcome = Literal["stored", "duplicate", "conflict"]

_COLUMNS = ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
            "error, created_at, updated_at")


class Event(NamedTuple):
    id: int
    source: str
    source_id: str
    payload: str
    status: str
    attempts: int
    claim_gen: int | None
    available_at: int
    error: str | None
    created_at: int
    updated_at: int


class IngestResult(NamedTuple):
    outcome: Outcome
    id: int
    source: str
    source_id: str


# Sources agentbox writes itself: an outside delivery under one of them could
# take the key of a timer occurrence or of an approval's one outcome.
RESERVED_SOURCES = {"approval": "agentbox approve", "timer": "agentbox schedule"}


def check_delivery_key(source: str, source_id: str) -> None:
    """A key for an event delivered from outside (``agentbox ingest``)."""
    check_key(source, source_id)
    if source in RESERVED_SOURCES:
        raise BadInput(f"source {source!r} is kept for agentbox's own events; "
                       f"use `{RESERVED_SOURCES[source]}` instead")


def check_key(source: str, source_id: str) -> None:
    """Refuse keys that could never be stored or looked up reliably."""
    for name, value in (("source", source), ("source_id", source_id)):
        if not isinstance(value, str) or not value:
            raise BadInput(f"{name} must be a non-empty string")
        if len(value) > MAX_KEY_LENGTH:
            raise BadInput(f"{name} is longer than {MAX_KEY_LENGTH} characters")
        if "\x00" in value:
            raise BadInput(f"{name} contains a NUL character")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{name} is not valid UTF-8") from None


def store_in(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
             now: int, record_conflict: bool = True) -> IngestResult:
    """Store an event inside the caller's write transaction."""
    row = conn.execute(
        """INSERT INTO events (source, source_id, payload, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?) ON CONFLICT (source, source_id) DO NOTHING RETURNING id""",
        (source, source_id, payload, now, now)).fetchone()
    if row is not None:  # the events_stored trigger has begun its history
        return IngestResult("stored", row[0], source, source_id)
    event_id, stored = conn.execute(
        "SELECT id, payload FROM events WHERE source = ? AND source_id = ?",
        (source, source_id)).fetchone()
    if stored == payload:
        return IngestResult("duplicate", event_id, source, source_id)
    if record_conflict:
        import hashlib  # only for a conflict: keeps it off the ingest start-up path

        digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
        history.record(conn, now, "event", event_id, "conflict",
                       detail=f"refused a different payload (sha256 {digest}…)")
    return IngestResult("conflict", event_id, source, source_id)


def ingest(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
           now: int) -> IngestResult:
    """Store one event whose payload is already canonical JSON (see jsonutil)."""
    check_key(source, source_id)
    with write(conn):
        return store_in(conn, source, source_id, payload, now)


def ingest_many(conn: sqlite3.Connection, items: Iterable[tuple[str, str, str]],
                now: int, chunk: int = INGEST_CHUNK) -> list[IngestResult]:
    """Store many checked events, ``chunk`` per transaction, in order."""
    results: list[IngestResult] = []
    batch: list[tuple[str, str, str]] = []

    def flush() -> None:
        with write(conn):
            results.extend(store_in(conn, s, i, p, now) for s, i, p in batch)
        batch.clear()

    for source, source_id, payload in items:
        check_key(source, source_id)
        batch.append((source, source_id, payload))
        if len(batch) >= chunk:
            flush()
    if batch:
        flush()
    return results


def _events(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> list[Event]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM events WHERE {where}", params).fetchall()
    return [Event(*row) for row in rows]


def _requeue_abandoned(conn: sqlite3.Connection, generation: int, now: int,
                       policy: Policy) -> None:
    """Rows still running under an older generation lost their worker: retry them."""
    for event_id, attempts, old in conn.execute(
            """SELECT id, attempts, claim_gen FROM events
               WHERE status = 'running' AND claim_gen < ?""", (generation,)).fetchall():
        conn.execute(
            """UPDATE events SET status = 'pending', available_at = ?, updated_at = ?,
                   error = ? WHERE id = ?""",
            (now + policy.backoff(attempts), now,
             f"worker of generation {old} lost its lease during attempt {attempts}", event_id))
        history.record(conn, now, "event", event_id, "abandoned", generation=old,
                       detail=f"attempt {attempts} never finished")


def _bury_exhausted(conn: sqlite3.Connection, now: int, policy: Policy) -> None:
    buried = conn.execute(
        """UPDATE events SET status = 'dead', updated_at = ?,
               error = 'too many attempts (' || attempts || ')'
                       || COALESCE('; last: ' || error, '')
           WHERE status = 'pending' AND attempts >= ? RETURNING id""",
        (now, policy.max_attempts)).fetchall()
    reason = f"reached max_attempts {policy.max_attempts}"
    history.record_many(conn, now, "event", "dead", ((r[0], None, reason) for r in buried))


def claim(conn: sqlite3.Connection, holder: str, generation: int, now: int,
          policy: Policy) -> list[Event] | None:
    """Claim work for one run; None when this worker no longer holds the lease.

    A retried row (attempts > 0) is claimed alone; otherwise every available
    pending row, oldest first, up to ``max_batch``.
    """
    with write(conn):
        if not lease.holds(conn, holder, generation, now):
            return None
        _requeue_abandoned(conn, generation, now, policy)
        _bury_exhausted(conn, now, policy)
        retry = conn.execute(
            """SELECT id FROM events WHERE status = 'pending' AND attempts > 0
               AND available_at <= ? ORDER BY id LIMIT 1""", (now,)).fetchone()
        if retry is not None:
            pick, params = "SELECT ?", [retry[0]]
        else:
            pick = """SELECT id FROM events WHERE status = 'pending' AND available_at <= ?
                      ORDER BY id LIMIT ?"""
            params = [now, policy.max_batch]
        claimed = conn.execute(
            f"""UPDATE events SET status = 'running', attempts = attempts + 1,
                    claim_gen = ?, updated_at = ? WHERE id IN ({pick})
                RETURNING {_COLUMNS}""", [generation, now, *params]).fetchall()
        events = sorted((Event(*row) for row in claimed), key=lambda e: e.id)
        history.record_many(conn, now, "event", "claimed",
                            ((e.id, generation, f"attempt {e.attempts}") for e in events))
        return events


def _fenced(conn: sqlite3.Connection, holder: str, generation: int, now: int,
            ids: Sequence[int]) -> bool:
    """The lease is still ours and every row is still running under our claim."""
    if not lease.holds(conn, holder, generation, now):
        return False
    unique = sorted(set(ids))
    if not unique:
        return True
    marks = ",".join("?" * len(unique))
    mine = conn.execute(
        f"""SELECT COUNT(*) FROM events WHERE id IN ({marks})
            AND status = 'running' AND claim_gen = ?""", [*unique, generation]).fetchone()[0]
    return int(mine) == len(unique)


def finish(conn: sqlite3.Connection, holder: str, generation: int, now: int,
           ids: Sequence[int], answer: Answer | None = None) -> bool:
    """Mark a run's events done and write everything its answer asks for.

    One fenced transaction: a stale worker's finish changes nothing, and a
    finished event can never lose its reply or have one queued twice.
    """
    from agentbox.engine import approvals, outbox, timers
    from agentbox.engine.answer import Answer

    answer = answer or Answer()
    with write(conn):
        if not _fenced(conn, holder, generation, now, ids):
            return False
        unique = sorted(set(ids))
        conn.executemany(
            "UPDATE events SET status = 'done', error = NULL, updated_at = ? WHERE id = ?",
            [(now, i) for i in unique])
        history.record_many(conn, now, "event", "finished",
                            ((i, generation, None) for i in unique))
        outbox.queue_in(conn, now, generation, answer.messages)
        for request in answer.approvals:
            approvals.request_in(conn, request.id, now, request.expires_in, request.action)
        for follow_up in answer.timers:
            timers.add_in(conn, follow_up.to_timer(now), now, replace=True)
        return True


def fail(conn: sqlite3.Connection, holder: str, generation: int, now: int,
         ids: Sequence[int], error: str, policy: Policy) -> bool:
    """Record a handler error: retry later, or dead at once on the last attempt."""
    with write(conn):
        if not _fenced(conn, holder, generation, now, ids):
            return False
        unique = sorted(set(ids))
        for event_id, attempts in conn.execute(
                f"SELECT id, attempts FROM events WHERE id IN ({','.join('?' * len(unique))})",
                unique).fetchall():
            last = attempts >= policy.max_attempts
            conn.execute(
                """UPDATE events SET status = ?, error = ?, available_at = ?, updated_at = ?
                   WHERE id = ?""",
                ("dead" if last else "pending", error, now + policy.backoff(attempts), now,
                 event_id))
            history.record(conn, now, "event", event_id, "failed", generation, error)
            if last:
                history.record(conn, now, "event", event_id, "dead", generation,
                               f"failed on its last attempt ({attempts} of "
                               f"{policy.max_attempts})")
        return True


def get(conn: sqlite3.Connection, event_id: int) -> Event | None:
    found = _events(conn, "id = ?", (event_id,))
    return found[0] if found else None


def find(conn: sqlite3.Connection, source: str, source_id: str) -> Event | None:
    found = _events(conn, "source = ? AND source_id = ?", (source, source_id))
    return found[0] if found else None


def with_key_prefix(conn: sqlite3.Connection, source: str, prefix: str) -> list[Event]:
    """Events of ``source`` whose source_id starts with ``prefix``, oldest first.

    A range on the (source, source_id) key, so it reads only the matching rows.
    """
    bound = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return _events(conn, "source = ? AND source_id >= ? AND source_id < ? ORDER BY id",
                   (source, prefix, bound))


def dead(conn: sqlite3.Connection, limit: int | None = None) -> list[Event]:
    return _events(conn, "status = 'dead' ORDER BY id LIMIT ?",
                   (-1 if limit is None else limit,))


def replay(conn: sqlite3.Connection, ids: Sequence[int] | None, now: int) -> list[int]:
    """Dead events back to pending with attempts reset; same key, no new row.

    ``ids=None`` replays every dead event. Returns the ids replayed; ids that
    are not dead are left alone (the caller reports them).
    """
    with write(conn):
        if ids is None:
            where, params = "status = 'dead'", []
        else:
            where = f"status = 'dead' AND id IN ({','.join('?' * len(ids))})"
            params = list(ids)
        replayed = [r[0] for r in conn.execute(
            f"""UPDATE events SET status = 'pending', attempts = 0, available_at = 0,
                    claim_gen = NULL, error = NULL, updated_at = ?
                WHERE {where} RETURNING id""", [now, *params]).fetchall()]
        replayed.sort()
        history.record_many(conn, now, "event", "replayed", ((i, None, None) for i in replayed))
        return replayed
