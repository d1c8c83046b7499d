"""A run's transitions in one SQLite file: claim a batch, finish or fail behind the fence.

Which events a run claims and when a failure is final are decided in
:mod:`agentbox.rules.inbox`; this module reads what those rules need and
applies their decision inside one ``BEGIN IMMEDIATE`` transaction, after
checking the lease fence in the same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentbox.backends.sqlite import approvals, db, history, lease, outbox, timers
from agentbox.backends.sqlite.db import write
from agentbox.backends.sqlite.inbox import COLUMNS
from agentbox.rules import inbox as rules
from agentbox.rules.answer import Answer
from agentbox.rules.records import Event

if TYPE_CHECKING:
    from agentbox.rules.policy import Policy


def _requeue_abandoned(conn: sqlite3.Connection, generation: int, now: int,
                       policy: Policy) -> None:
    """Rows still running under an older generation lost their worker: retry them."""
    for event_id, attempts, old in conn.execute(
            """SELECT id, attempts, claim_gen FROM events
               WHERE status = 'running' AND claim_gen < ?""", (generation,)).fetchall():
        available_at, error = rules.abandoned(old, attempts, now, policy)
        conn.execute(
            """UPDATE events SET status = 'pending', available_at = ?, updated_at = ?,
                   error = ? WHERE id = ?""", (available_at, now, error, event_id))
        history.record(conn, now, "event", event_id, "abandoned", generation=old,
                       detail=f"attempt {attempts} never finished")


def _bury_exhausted(conn: sqlite3.Connection, now: int, policy: Policy) -> None:
    """Pending events out of attempts go dead (the threshold is the rule's, passed in)."""
    exhausted = [(i, a, e) for i, a, e in conn.execute(
        "SELECT id, attempts, error FROM events WHERE status = 'pending' AND attempts >= ?",
        (policy.max_attempts,)).fetchall() if rules.out_of_attempts(a, policy)]
    conn.executemany("UPDATE events SET status = 'dead', updated_at = ?, error = ? WHERE id = ?",
                     [(now, rules.exhausted(a, e), i) for i, a, e in exhausted])
    reason = rules.exhausted_reason(policy)
    history.record_many(conn, now, "event", "dead", ((i, None, reason) for i, _, _ in exhausted))


def claim(conn: sqlite3.Connection, holder: str, generation: int, now: int,
          policy: Policy) -> list[Event] | None:
    """Claim work for one run; None when this worker no longer holds the lease.

    A retried row (attempts > 0) is claimed alone; otherwise every available
    pending row, oldest first, up to ``max_batch``.
    """
    with write(conn):
        if not lease.holds(conn, holder, generation, now):
            return None
        db.set_meta(conn, db.LAST_RUN, now)
        _requeue_abandoned(conn, generation, now, policy)
        _bury_exhausted(conn, now, policy)
        retry = conn.execute(
            """SELECT id FROM events WHERE status = 'pending' AND attempts > 0
               AND available_at <= ? ORDER BY id LIMIT 1""", (now,)).fetchone()
        fresh = [] if retry is not None else [r[0] for r in conn.execute(
            """SELECT id FROM events WHERE status = 'pending' AND available_at <= ?
               ORDER BY id LIMIT ?""", (now, policy.max_batch)).fetchall()]
        ids = rules.batch(None if retry is None else retry[0], fresh, policy)
        claimed = conn.execute(
            f"""UPDATE events SET status = 'running', attempts = attempts + 1,
                    claim_gen = ?, updated_at = ? WHERE id IN ({",".join("?" * len(ids))})
                RETURNING {COLUMNS}""", [generation, now, *ids]).fetchall()
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
            then = rules.after_failure(attempts, now, policy)
            conn.execute(
                """UPDATE events SET status = ?, error = ?, available_at = ?, updated_at = ?
                   WHERE id = ?""", (then.status, error, then.available_at, now, event_id))
            history.record(conn, now, "event", event_id, "failed", generation, error)
            if then.dead_reason is not None:
                history.record(conn, now, "event", event_id, "dead", generation,
                               then.dead_reason)
        return True


def interrupt(conn: sqlite3.Connection, holder: str, generation: int, now: int,
              ids: Sequence[int]) -> bool:
    """Give a stopped run's events back to pending, each with its attempt given back."""
    with write(conn):
        if not _fenced(conn, holder, generation, now, ids):
            return False
        unique = sorted(set(ids))
        rows = conn.execute(
            f"SELECT id, attempts FROM events WHERE id IN ({','.join('?' * len(unique))})",
            unique).fetchall()
        conn.executemany(
            "UPDATE events SET status = 'pending', attempts = ?, updated_at = ? WHERE id = ?",
            [(rules.given_back(attempts), now, event_id) for event_id, attempts in rows])
        history.record_many(conn, now, "event", "interrupted",
                            ((event_id, generation, rules.interrupted(attempts))
                             for event_id, attempts in rows))
        return True


def next_work(conn: sqlite3.Connection, now: int) -> int | None:
    """When a run next has something to do in this inbox (see rules.inbox.next_work)."""
    from agentbox.backends.sqlite import lease as leases

    # Most of the time some pending event is available now: find one by the
    # index without taking the minimum over a long queue.
    ready = conn.execute("SELECT available_at FROM events WHERE status = 'pending' "
                         "AND available_at <= ? LIMIT 1", (now,)).fetchone()
    first = ready[0] if ready else conn.execute(
        "SELECT MIN(available_at) FROM events WHERE status = 'pending'").fetchone()[0]
    running = conn.execute("SELECT 1 FROM events WHERE status = 'running' LIMIT 1").fetchone()
    timer = timers.next_due(conn)
    held = leases.current(conn)
    return rules.next_work(first, timer.due if timer else None, running is not None, held,
                           now)
