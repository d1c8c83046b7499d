"""Pruning one SQLite inbox in short transactions, and handing freed pages back.

What may go is decided in :mod:`agentbox.rules.retention`. Each step is one
``BEGIN IMMEDIATE`` transaction over at most ``limit`` rows (plus their
history), oldest first, so an ingest waiting on the write lock waits for one
step, never for the whole prune. Events and messages are found by walking
their (state, id) index; remembered keys, a small table, are read whole once
events, messages and dispatches are done (an index on their expiry would
cost more space than the scan costs time).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from agentbox.backends.sqlite import db
from agentbox.backends.sqlite.db import write
from agentbox.rules.records import SETTLED_DISPATCH_STATES
from agentbox.rules.retention import KEPT_SOURCES, Cutoffs, PruneCounts, digest

CHECKPOINT_WAIT_MS = 200
_KEPT = ",".join(f"'{s}'" for s in KEPT_SOURCES)
_SETTLED = ",".join(f"'{s}'" for s in SETTLED_DISPATCH_STATES)

# The rows each kind of prune would take; the same conditions count them for a
# dry run and select them for a step. The newest event and message always stay:
# SQLite numbers a new row after the highest id left, and an id must never be
# reused (an event's idempotency key is made of it).
_DONE = f"""FROM events WHERE status = 'done' AND updated_at < :done_before
            AND source NOT IN ({_KEPT}) AND id < (SELECT MAX(id) FROM events)"""
_SENT = """FROM outbox WHERE state = 'sent' AND sent_at < :sent_before
           AND id < (SELECT MAX(id) FROM outbox)"""
_DISPATCHES = f"""FROM dispatches WHERE state IN ({_SETTLED})
                  AND finished_at < :dispatch_before"""
_FORGOTTEN = "FROM pruned_keys WHERE until <= :now"
_TIMER_HISTORY = "FROM history WHERE subject = 'timer' AND at < :done_before"


def prunable(conn: sqlite3.Connection, cut: Cutoffs) -> PruneCounts:
    """What a prune at these cutoffs would remove, counted in one read."""
    params = cut._asdict()
    counts = [int(conn.execute(f"SELECT COUNT(*) {rows}", params).fetchone()[0])
              for rows in (_DONE, _SENT, _DISPATCHES, _FORGOTTEN, _TIMER_HISTORY)]
    return PruneCounts(*counts)


def _forget_history(conn: sqlite3.Connection, subject: str, ids: Sequence[object]) -> None:
    conn.executemany("DELETE FROM history WHERE subject = ? AND subject_id = ?",
                     [(subject, str(i)) for i in ids])


def _events(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> int:
    """Done events, their history gone and their keys remembered for the window."""
    rows = conn.execute(f"SELECT id, source, source_id, payload, created_at {_DONE} "
                        "ORDER BY id LIMIT :limit", {**cut._asdict(), "limit": limit}).fetchall()
    remembered = [(source, source_id, digest(payload), event_id, until)
                  for event_id, source, source_id, payload, created_at in rows
                  if (until := cut.remembered_until(created_at)) is not None]
    conn.executemany("""INSERT OR REPLACE INTO pruned_keys (source, source_id, digest,
                            event_id, until) VALUES (?, ?, ?, ?, ?)""", remembered)
    ids = [row[0] for row in rows]
    _forget_history(conn, "event", ids)
    conn.executemany("DELETE FROM events WHERE id = ?", [(i,) for i in ids])
    return len(ids)


def _messages(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> int:
    ids = [r[0] for r in conn.execute(f"SELECT id {_SENT} ORDER BY id LIMIT :limit",
                                      {**cut._asdict(), "limit": limit}).fetchall()]
    _forget_history(conn, "message", ids)
    conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])
    return len(ids)


def _dispatches(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> int:
    keys = [r[0] for r in conn.execute(f"SELECT key {_DISPATCHES} ORDER BY seq LIMIT :limit",
                                       {**cut._asdict(), "limit": limit}).fetchall()]
    _forget_history(conn, "dispatch", keys)
    conn.executemany("DELETE FROM dispatches WHERE key = ?", [(k,) for k in keys])
    return len(keys)


def _forgotten(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> int:
    """Keys past the dedupe window: from now on they may be stored again."""
    return conn.execute(
        f"""DELETE FROM pruned_keys WHERE (source, source_id) IN
                (SELECT source, source_id {_FORGOTTEN} ORDER BY until LIMIT :limit)""",
        {**cut._asdict(), "limit": limit}).rowcount


def _timer_history(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> int:
    """A timer's story keeps its last ``keep_done``: each occurrence adds a line."""
    return conn.execute(
        f"DELETE FROM history WHERE id IN (SELECT id {_TIMER_HISTORY} ORDER BY id LIMIT :limit)",
        {**cut._asdict(), "limit": limit}).rowcount


_KINDS: tuple[Callable[[sqlite3.Connection, Cutoffs, int], int], ...] = (
    _events, _messages, _dispatches, _forgotten, _timer_history)


def step(conn: sqlite3.Connection, cut: Cutoffs, limit: int) -> PruneCounts:
    """One transaction: up to ``limit`` rows, taken kind after kind, oldest first."""
    counts: list[int] = []
    with write(conn):
        left = limit
        for prune in _KINDS:
            done = prune(conn, cut, left) if left > 0 else 0
            counts.append(done)
            left -= done
    return PruneCounts(*counts)


def record(conn: sqlite3.Connection, now: int) -> None:
    with write(conn):
        db.set_meta(conn, db.LAST_PRUNE, now)


def reclaim(conn: sqlite3.Connection, max_pages: int) -> int:
    """Hand up to ``max_pages`` free pages back to the disk, in one transaction;
    once none are left, the write-ahead log too. Returns the pages handed back.

    Only a file made with ``auto_vacuum = INCREMENTAL`` (every inbox this
    version creates) can give pages back; an older file reuses its free pages
    instead, so it stops growing without shrinking.
    """
    incremental = conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    pages = min(int(conn.execute("PRAGMA freelist_count").fetchone()[0]), max_pages)
    if incremental and pages:
        # One statement, its own transaction. It frees one page per step, and only
        # executescript steps a statement that returns no rows to its end.
        conn.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        return pages
    _truncate_log(conn)
    return 0


def _truncate_log(conn: sqlite3.Connection) -> None:
    """Cut the write-ahead log back to nothing, if no reader needs it right now.

    A big prune leaves a log as large as what it changed. The checkpoint
    waits a moment at most for readers (a backup in progress, say), and is
    simply skipped if they stay: the log is cut back at a later checkpoint.
    """
    wait = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute(f"PRAGMA busy_timeout = {min(wait, CHECKPOINT_WAIT_MS)}")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {wait}")
