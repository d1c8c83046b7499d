"""A run's transitions in one inbox: claim a batch, finish or fail behind the fence.

Which events a run claims and when a failure is final are decided in
:mod:`agentbox.rules.inbox`; this module reads what those rules need and
applies their decision inside one transaction holding the inbox lock, after
checking the lease fence read by the statement that took the lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from agentbox.backends.postgres import approvals, history, outbox, timers
from agentbox.backends.postgres import lease as leases
from agentbox.backends.postgres.db import Box, Tx
from agentbox.backends.postgres.inbox import COLUMNS
from agentbox.backends.postgres.lease import locked
from agentbox.rules import inbox as rules
from agentbox.rules.answer import Answer
from agentbox.rules.lease import holds
from agentbox.rules.records import Event, Lease

if TYPE_CHECKING:
    from agentbox.rules.policy import Policy

_EXHAUSTED = """SELECT 'exhausted', id, attempts, claim_gen, error FROM events
                WHERE inbox_id = %(box)s AND status = 'pending' AND attempts >= %(max)s"""
_READY = """(SELECT 'retry', id, attempts, claim_gen, error FROM events
             WHERE inbox_id = %(box)s AND status = 'pending' AND attempts > 0
               AND available_at <= %(now)s ORDER BY id LIMIT 1)
            UNION ALL
            (SELECT 'fresh', id, attempts, claim_gen, error FROM events
             WHERE inbox_id = %(box)s AND status = 'pending' AND available_at <= %(now)s
             ORDER BY id LIMIT %(batch)s)"""
# Rows still running under an older generation lost their worker; with them,
# what the next steps look at, so that a claim with nothing to clean up reads once.
_CANDIDATES = f"""SELECT 'abandoned', id, attempts, claim_gen, error FROM events
                  WHERE inbox_id = %(box)s AND status = 'running' AND claim_gen < %(gen)s
                  UNION ALL {_EXHAUSTED} UNION ALL {_READY}"""

Rows = dict[str, list[tuple[int, int, int | None, str | None]]]


def _read(tx: Tx, query: str, args: dict[str, object]) -> Rows:
    """Candidate rows by kind: (id, attempts, claim_gen, error) each, oldest first."""
    found: Rows = {"abandoned": [], "exhausted": [], "retry": [], "fresh": []}
    for kind, *row in tx.read(query, args).fetchall():
        found[kind].append(tuple(row))
    return found


def _requeue(tx: Tx, rows: list[tuple[int, int, int | None, str | None]], now: int,
             policy: Policy) -> None:
    """Abandoned rows go back to pending, retried after the backoff."""
    for event_id, attempts, old, _ in rows:
        available_at, error = rules.abandoned(old, attempts, now, policy)
        tx.write("""UPDATE events SET status = 'pending', available_at = %s, updated_at = %s,
                        error = %s WHERE inbox_id = %s AND id = %s""",
                 (available_at, now, error, tx.id, event_id))
    history.record_many(tx, now, "event", "abandoned",
                        ((i, old, f"attempt {a} never finished") for i, a, old, _ in rows))


def _bury(tx: Tx, rows: list[tuple[int, int, int | None, str | None]], now: int,
          policy: Policy) -> None:
    """Pending rows out of attempts go dead (the threshold is the rule's)."""
    exhausted = [(i, a, e) for i, a, _, e in rows if rules.out_of_attempts(a, policy)]
    for event_id, attempts, error in exhausted:
        tx.write("""UPDATE events SET status = 'dead', updated_at = %s, error = %s
                    WHERE inbox_id = %s AND id = %s""",
                 (now, rules.exhausted(attempts, error), tx.id, event_id))
    reason = rules.exhausted_reason(policy)
    history.record_many(tx, now, "event", "dead", ((i, None, reason) for i, _, _ in exhausted))


def claim(conn: Connection[Any], box_id: int, holder: str, generation: int, now: int,
          policy: Policy) -> list[Event] | None:
    """Claim work for one run; None when this worker no longer holds the lease.

    A retried row (attempts > 0) is claimed alone; otherwise every available
    pending row, oldest first, up to ``max_batch``. What the rules need is
    read once; only after requeueing or burying is it read again.
    """
    args: dict[str, object] = {"box": box_id, "gen": generation, "now": now,
                               "max": policy.max_attempts, "batch": policy.max_batch}
    with locked(conn, box_id) as (tx, lease):
        if not holds(lease, holder, generation, now):
            return None
        tx.write("UPDATE inboxes SET last_run = %s WHERE id = %s", (now, box_id))
        found = _read(tx, _CANDIDATES, args)
        if found["abandoned"]:
            _requeue(tx, found["abandoned"], now, policy)
            found = _read(tx, f"{_EXHAUSTED} UNION ALL {_READY}", args)
        if found["exhausted"]:
            _bury(tx, found["exhausted"], now, policy)
            found = _read(tx, _READY, args)
        retry = found["retry"][0][0] if found["retry"] else None
        ids = rules.batch(retry, [i for i, *_ in found["fresh"]], policy)
        if not ids:
            return []
        claimed = tx.read(
            f"""UPDATE events SET status = 'running', attempts = attempts + 1,
                    claim_gen = %s, updated_at = %s WHERE inbox_id = %s AND id = ANY(%s)
                RETURNING {COLUMNS}""", (generation, now, box_id, ids)).fetchall()
        events = sorted((Event(*row) for row in claimed), key=lambda e: e.id)
        history.record_many(tx, now, "event", "claimed",
                            ((e.id, generation, f"attempt {e.attempts}") for e in events))
        return events


def _fenced(tx: Tx, lease: Lease | None, holder: str, generation: int, now: int,
            ids: Sequence[int]) -> dict[int, int] | None:
    """The attempts of each row, if the lease is still ours and every row still
    running under our claim; else None."""
    if not holds(lease, holder, generation, now):
        return None
    unique = sorted(set(ids))
    if not unique:
        return {}
    rows = tx.read(
        """SELECT id, attempts FROM events WHERE inbox_id = %s AND id = ANY(%s)
           AND status = 'running' AND claim_gen = %s""", (tx.id, unique, generation)).fetchall()
    return {int(i): int(a) for i, a in rows} if len(rows) == len(unique) else None


def finish(conn: Connection[Any], box_id: int, holder: str, generation: int, now: int,
           ids: Sequence[int], answer: Answer | None = None) -> bool:
    """Mark a run's events done and write everything its answer asks for.

    One fenced transaction: a stale worker's finish changes nothing, and a
    finished event can never lose its reply or have one queued twice.
    """
    answer = answer or Answer()
    with locked(conn, box_id) as (tx, lease):
        mine = _fenced(tx, lease, holder, generation, now, ids)
        if mine is None:
            return False
        done = sorted(mine)
        tx.write("""UPDATE events SET status = 'done', error = NULL, updated_at = %s
                    WHERE inbox_id = %s AND id = ANY(%s)""", (now, box_id, done))
        history.record_many(tx, now, "event", "finished", ((i, generation, None) for i in done))
        outbox.queue_in(tx, now, generation, answer.messages)
        for request in answer.approvals:
            approvals.request_in(tx, request.id, now, request.expires_in, request.action)
        for follow_up in answer.timers:
            timers.add_in(tx, follow_up.to_timer(now), now, replace=True)
        return True


def fail(conn: Connection[Any], box_id: int, holder: str, generation: int, now: int,
         ids: Sequence[int], error: str, policy: Policy) -> bool:
    """Record a handler error: retry later, or dead at once on the last attempt."""
    with locked(conn, box_id) as (tx, lease):
        mine = _fenced(tx, lease, holder, generation, now, ids)
        if mine is None:
            return False
        for event_id, attempts in sorted(mine.items()):
            then = rules.after_failure(attempts, now, policy)
            tx.write("""UPDATE events SET status = %s, error = %s, available_at = %s,
                            updated_at = %s WHERE inbox_id = %s AND id = %s""",
                     (then.status, error, then.available_at, now, box_id, event_id))
            history.record(tx, now, "event", event_id, "failed", generation, error)
            if then.dead_reason is not None:
                history.record(tx, now, "event", event_id, "dead", generation,
                               then.dead_reason)
        return True


def interrupt(conn: Connection[Any], box_id: int, holder: str, generation: int, now: int,
              ids: Sequence[int]) -> bool:
    """Give a stopped run's events back to pending, each with its attempt given back."""
    with locked(conn, box_id) as (tx, lease):
        mine = _fenced(tx, lease, holder, generation, now, ids)
        if mine is None:
            return False
        for event_id, attempts in sorted(mine.items()):
            tx.write("""UPDATE events SET status = 'pending', attempts = %s, updated_at = %s
                        WHERE inbox_id = %s AND id = %s""",
                     (rules.given_back(attempts), now, box_id, event_id))
        history.record_many(tx, now, "event", "interrupted",
                            ((i, generation, rules.interrupted(a))
                             for i, a in sorted(mine.items())))
        return True


# What rules.inbox.next_work needs of each inbox, in one query: a pending event
# available now (found by the index, without taking the minimum over a long
# queue), else the earliest; whether any is running; the next timer; the lease.
_WORK = f"""
SELECT i.name,
       COALESCE((SELECT available_at FROM events e WHERE e.inbox_id = i.id
                 AND status = 'pending' AND available_at <= %(now)s LIMIT 1),
                (SELECT MIN(available_at) FROM events e WHERE e.inbox_id = i.id
                 AND status = 'pending')),
       EXISTS (SELECT FROM events e WHERE e.inbox_id = i.id AND status = 'running'),
       (SELECT MIN(due) FROM timers t WHERE t.inbox_id = i.id AND NOT done),
       {leases.COLUMNS}
FROM inboxes i"""


def _work(rows: list[tuple[Any, ...]], now: int) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, first, running, timer, *lease in rows:
        due = rules.next_work(first, timer, bool(running), leases.from_row(lease), now)
        if due is not None:
            found[str(name)] = due
    return found


def next_work(box: Box, now: int) -> int | None:
    """When a run next has something to do in this inbox (see rules.inbox.next_work)."""
    rows = box.read(f"{_WORK} WHERE i.id = %(box)s", {"box": box.id, "now": now}).fetchall()
    return next(iter(_work(rows, now).values()), None)


def next_work_of(conn: Connection[Any], users: Sequence[str], now: int) -> dict[str, int]:
    """:func:`next_work` of each of ``users`` that has anything scheduled, in one query."""
    rows = conn.execute(f"{_WORK} WHERE i.name = ANY(%(users)s)",
                        {"users": list(users), "now": now}).fetchall()
    return _work(rows, now)
