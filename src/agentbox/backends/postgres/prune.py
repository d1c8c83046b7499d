"""Pruning one inbox in short transactions.

What may go is decided in :mod:`agentbox.rules.retention`. Each step is one
transaction over at most ``limit`` rows (plus their history), oldest first,
holding the inbox lock so that no run or dispatch changes the rows it
removes; ingest never waits for it. Space comes back by itself: autovacuum
marks the deleted rows' room free for new ones, so :func:`reclaim` has
nothing to do.

One gap, narrower than any clock: a delivery whose statement began before a
step that prunes its key's event, and reached the key while the step was
deleting it, stores the key anew.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres.db import Box, Tx
from agentbox.backends.postgres.lease import locked
from agentbox.rules.records import SETTLED_DISPATCH_STATES
from agentbox.rules.retention import KEPT_SOURCES, Cutoffs, PruneCounts, digest

# The rows each kind of prune would take; the same conditions count them for a
# dry run and select them for a step. The newest event and message of an
# inbox always stay, as on SQLite (see rules.retention).
_DONE = """FROM events WHERE inbox_id = %(box)s AND status = 'done'
           AND updated_at < %(done_before)s AND source <> ALL(%(kept)s)
           AND id < (SELECT MAX(id) FROM events WHERE inbox_id = %(box)s)"""
_SENT = """FROM outbox WHERE inbox_id = %(box)s AND state = 'sent'
           AND sent_at < %(sent_before)s
           AND id < (SELECT MAX(id) FROM outbox WHERE inbox_id = %(box)s)"""
_DISPATCHES = """FROM dispatches WHERE inbox_id = %(box)s AND state = ANY(%(settled)s)
                 AND finished_at < %(dispatch_before)s"""
_FORGOTTEN = "FROM pruned_keys WHERE inbox_id = %(box)s AND until <= %(now)s"
_TIMER_HISTORY = """FROM history WHERE inbox_id = %(box)s AND subject = 'timer'
                    AND at < %(done_before)s"""


def _params(box_id: int, cut: Cutoffs, limit: int = 0) -> dict[str, object]:
    return {**cut._asdict(), "box": box_id, "limit": limit, "kept": list(KEPT_SOURCES),
            "settled": list(SETTLED_DISPATCH_STATES)}


def prunable(box: Box, cut: Cutoffs) -> PruneCounts:
    """What a prune at these cutoffs would remove, counted in one read."""
    counts = ", ".join(f"(SELECT COUNT(*) {rows})"
                       for rows in (_DONE, _SENT, _DISPATCHES, _FORGOTTEN, _TIMER_HISTORY))
    row = box.read(f"SELECT {counts}", _params(box.id, cut)).fetchone()
    assert row is not None
    return PruneCounts(*(int(n) for n in row))


def _forget_history(tx: Tx, subject: str, ids: Sequence[object]) -> None:
    if ids:
        tx.write("""DELETE FROM history WHERE inbox_id = %s AND subject = %s
                    AND subject_id = ANY(%s)""", (tx.id, subject, [str(i) for i in ids]))


def _events(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Done events, their history gone and their keys remembered for the window."""
    rows = tx.read(f"SELECT id, source, source_id, payload, created_at {_DONE} "
                   "ORDER BY id LIMIT %(limit)s", _params(tx.id, cut, limit)).fetchall()
    for event_id, source, source_id, payload, created_at in rows:
        until = cut.remembered_until(created_at)
        if until is not None:
            tx.write("""INSERT INTO pruned_keys (inbox_id, source, source_id, digest, event_id,
                                                 until) VALUES (%s, %s, %s, %s, %s, %s)
                        ON CONFLICT (inbox_id, source, source_id) DO UPDATE SET
                            (digest, event_id, until) = (excluded.digest, excluded.event_id,
                                                         excluded.until)""",
                     (tx.id, source, source_id, digest(payload), event_id, until))
    ids = [int(row[0]) for row in rows]
    _forget_history(tx, "event", ids)
    if ids:
        tx.write("DELETE FROM events WHERE inbox_id = %s AND id = ANY(%s)", (tx.id, ids))
    return len(ids)


def _rows(rows: str, column: str, order: str, table: str,
          subject: str) -> Callable[[Tx, Cutoffs, int], int]:
    """A prune of ``table``: the rows ``rows`` selects, their history gone with them."""

    def prune(tx: Tx, cut: Cutoffs, limit: int) -> int:
        found = [r[0] for r in tx.read(f"SELECT {column} {rows} ORDER BY {order} "
                                       "LIMIT %(limit)s", _params(tx.id, cut, limit))]
        _forget_history(tx, subject, found)
        if found:
            tx.write(f"DELETE FROM {table} WHERE inbox_id = %s AND {column} = ANY(%s)",
                     (tx.id, found))
        return len(found)

    return prune


_messages = _rows(_SENT, "id", "id", "outbox", "message")
_dispatches = _rows(_DISPATCHES, "key", "seq", "dispatches", "dispatch")


def _forgotten(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Keys past the dedupe window: from now on they may be stored again."""
    return len(tx.read(
        f"""DELETE FROM pruned_keys WHERE inbox_id = %(box)s AND (source, source_id) IN
                (SELECT source, source_id {_FORGOTTEN} ORDER BY until LIMIT %(limit)s)
            RETURNING 1""", _params(tx.id, cut, limit)).fetchall())


def _timer_history(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """A timer's story keeps its last ``keep_done``: each occurrence adds a line."""
    return len(tx.read(
        f"""DELETE FROM history WHERE inbox_id = %(box)s
                AND id IN (SELECT id {_TIMER_HISTORY} ORDER BY id LIMIT %(limit)s)
            RETURNING 1""",
        _params(tx.id, cut, limit)).fetchall())


_KINDS: tuple[Callable[[Tx, Cutoffs, int], int], ...] = (
    _events, _messages, _dispatches, _forgotten, _timer_history)


def step(conn: Connection[Any], box_id: int, cut: Cutoffs, limit: int) -> PruneCounts:
    """One transaction: up to ``limit`` rows, taken kind after kind, oldest first."""
    counts: list[int] = []
    with locked(conn, box_id) as (tx, _):
        left = limit
        for prune in _KINDS:
            done = prune(tx, cut, left) if left > 0 else 0
            counts.append(done)
            left -= done
    return PruneCounts(*counts)


def record(conn: Connection[Any], box_id: int, now: int) -> None:
    with locked(conn, box_id) as (tx, _):
        tx.write("UPDATE inboxes SET last_prune = %s WHERE id = %s", (now, box_id))
