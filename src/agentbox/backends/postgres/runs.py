"""A run's transitions in one box: claim a batch, finish or fail behind the fence.

Which events a run claims and when a failure is final are decided in
:mod:`agentbox.rules.inbox`; this module reads what those rules need and
applies their decision inside one transaction holding the box lock, after
checking the lease fence read by the statement that took the lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import Connection, Cursor

from agentbox.backends.postgres import approvals, history, outbox, timers
from agentbox.backends.postgres.inbox import COLUMNS
from agentbox.backends.postgres.lease import locked
from agentbox.rules import inbox as rules
from agentbox.rules.answer import Answer
from agentbox.rules.lease import holds
from agentbox.rules.records import Event, Lease

if TYPE_CHECKING:
    from agentbox.rules.policy import Policy


def _abandoned(conn: Connection[Any], box: int, generation: int) -> Cursor[Any]:
    """Rows still running under an older generation: their worker is gone."""
    return conn.execute("""SELECT id, attempts, claim_gen FROM events
                           WHERE inbox_id = %s AND status = 'running' AND claim_gen < %s""",
                        (box, generation))


def _exhausted(conn: Connection[Any], box: int, policy: Policy) -> Cursor[Any]:
    return conn.execute("""SELECT id, attempts, error FROM events
                           WHERE inbox_id = %s AND status = 'pending' AND attempts >= %s""",
                        (box, policy.max_attempts))


def _ready(conn: Connection[Any], box: int, now: int, policy: Policy) -> Cursor[Any]:
    """The oldest available retry, then the oldest available rows: (retry?, id, attempts)."""
    return conn.execute(
        """(SELECT true, id, attempts FROM events
            WHERE inbox_id = %(inbox)s AND status = 'pending' AND attempts > 0
              AND available_at <= %(now)s ORDER BY id LIMIT 1)
           UNION ALL
           (SELECT false, id, attempts FROM events
            WHERE inbox_id = %(inbox)s AND status = 'pending' AND available_at <= %(now)s
            ORDER BY id LIMIT %(batch)s)""",
        {"inbox": box, "now": now, "batch": policy.max_batch})


def _requeue(conn: Connection[Any], box: int, rows: list[tuple[Any, ...]], now: int,
             policy: Policy) -> None:
    """Abandoned rows go back to pending, retried after the backoff."""
    moves = [(i, a, old, *rules.abandoned(old, a, now, policy)) for i, a, old in rows]
    conn.cursor().executemany(
        """UPDATE events SET status = 'pending', available_at = %s, updated_at = %s, error = %s
           WHERE inbox_id = %s AND id = %s""",
        [(available_at, now, error, box, i) for i, _, _, available_at, error in moves])
    history.record_many(conn, box, now, "event", "abandoned",
                        ((i, old, f"attempt {a} never finished") for i, a, old, _, _ in moves))


def _bury(conn: Connection[Any], box: int, rows: list[tuple[Any, ...]], now: int,
          policy: Policy) -> None:
    """Pending rows out of attempts go dead (the threshold is the rule's)."""
    exhausted = [(i, a, e) for i, a, e in rows if rules.out_of_attempts(a, policy)]
    conn.cursor().executemany(
        "UPDATE events SET status = 'dead', updated_at = %s, error = %s "
        "WHERE inbox_id = %s AND id = %s",
        [(now, rules.exhausted(a, e), box, i) for i, a, e in exhausted])
    reason = rules.exhausted_reason(policy)
    history.record_many(conn, box, now, "event", "dead",
                        ((i, None, reason) for i, _, _ in exhausted))


def claim(conn: Connection[Any], box: int, holder: str, generation: int, now: int,
          policy: Policy) -> list[Event] | None:
    """Claim work for one run; None when this worker no longer holds the lease.

    A retried row (attempts > 0) is claimed alone; otherwise every available
    pending row, oldest first, up to ``max_batch``. The three reads go out
    together; they are read again only after requeueing or burying changed
    the rows they look at.
    """
    with locked(conn, box) as lease:
        if not holds(lease, holder, generation, now):
            return None
        exhausted = _exhausted(conn, box, policy)
        ready = _ready(conn, box, now, policy)
        gone = _abandoned(conn, box, generation).fetchall()
        if gone:
            _requeue(conn, box, gone, now, policy)
            exhausted = _exhausted(conn, box, policy)
        dead = exhausted.fetchall()
        if dead:
            _bury(conn, box, dead, now, policy)
        if gone or dead:
            ready = _ready(conn, box, now, policy)
        rows = ready.fetchall()
        ids = rules.batch(next((i for retry, i, _ in rows if retry), None),
                          [i for retry, i, _ in rows if not retry], policy)
        if not ids:
            return []
        attempts = {i: a for _, i, a in rows}
        claimed = conn.execute(
            f"""UPDATE events SET status = 'running', attempts = attempts + 1,
                    claim_gen = %s, updated_at = %s WHERE inbox_id = %s AND id = ANY(%s)
                RETURNING {COLUMNS}""", (generation, now, box, ids))
        history.record_many(conn, box, now, "event", "claimed",
                            ((i, generation, f"attempt {attempts[i] + 1}") for i in ids))
    return sorted((Event(*row) for row in claimed.fetchall()), key=lambda e: e.id)


def _fenced(conn: Connection[Any], box: int, lease: Lease | None, holder: str,
            generation: int, now: int, ids: Sequence[int]) -> dict[int, int] | None:
    """The attempts of each row, if the lease is still ours and every row still
    running under our claim; else None."""
    if not holds(lease, holder, generation, now):
        return None
    unique = sorted(set(ids))
    if not unique:
        return {}
    rows = conn.execute(
        """SELECT id, attempts FROM events WHERE inbox_id = %s AND id = ANY(%s)
           AND status = 'running' AND claim_gen = %s""", (box, unique, generation)).fetchall()
    return {int(i): int(a) for i, a in rows} if len(rows) == len(unique) else None


def finish(conn: Connection[Any], box: int, holder: str, generation: int, now: int,
           ids: Sequence[int], answer: Answer | None = None) -> bool:
    """Mark a run's events done and write everything its answer asks for.

    One fenced transaction: a stale worker's finish changes nothing, and a
    finished event can never lose its reply or have one queued twice.
    """
    answer = answer or Answer()
    with locked(conn, box) as lease:
        mine = _fenced(conn, box, lease, holder, generation, now, ids)
        if mine is None:
            return False
        done = sorted(mine)
        conn.execute("""UPDATE events SET status = 'done', error = NULL, updated_at = %s
                        WHERE inbox_id = %s AND id = ANY(%s)""", (now, box, done))
        history.record_many(conn, box, now, "event", "finished",
                            ((i, generation, None) for i in done))
        outbox.queue_in(conn, box, now, generation, answer.messages)
        for request in answer.approvals:
            approvals.request_in(conn, box, request.id, now, request.expires_in,
                                 request.action)
        for follow_up in answer.timers:
            timers.add_in(conn, box, follow_up.to_timer(now), now, replace=True)
        return True


def fail(conn: Connection[Any], box: int, holder: str, generation: int, now: int,
         ids: Sequence[int], error: str, policy: Policy) -> bool:
    """Record a handler error: retry later, or dead at once on the last attempt."""
    with locked(conn, box) as lease:
        mine = _fenced(conn, box, lease, holder, generation, now, ids)
        if mine is None:
            return False
        after = {i: rules.after_failure(a, now, policy) for i, a in sorted(mine.items())}
        conn.cursor().executemany(
            """UPDATE events SET status = %s, error = %s, available_at = %s, updated_at = %s
               WHERE inbox_id = %s AND id = %s""",
            [(then.status, error, then.available_at, now, box, i)
             for i, then in after.items()])
        history.record_many(conn, box, now, "event", "failed",
                            ((i, generation, error) for i in after))
        history.record_many(conn, box, now, "event", "dead",
                            ((i, generation, then.dead_reason) for i, then in after.items()
                             if then.dead_reason is not None))
        return True
