"""A run's transitions: claim a batch, then finish, fail or give it back behind the fence.

Which events a run claims and when a failure is final are decided in
:mod:`agentbox.rules.inbox`; this module reads what those rules need and
applies their decision inside one transaction holding the inbox's lock, after
checking the lease fence read by the statement that took the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from agentbox.ledger import history
from agentbox.ledger.core import EPOCHS, LEASE_COLUMNS, Core, among, keys_of, lease_of
from agentbox.ledger.inbox import COLUMNS, event_of
from agentbox.ledger.state import CURRENT, current_of
from agentbox.rules.lease import holds
from agentbox.rules.records import Event, Lease

if TYPE_CHECKING:
    from agentbox.ledger.engine import Params, Reader, Row, Tx
    from agentbox.rules.answer import Answer
    from agentbox.rules.policy import Policy
    from agentbox.rules.state import Version

# agentbox.rules.inbox, where what a run claims and what a failure leads to is
# decided, is imported where it is applied: an ingest loads this part too.

Candidate = tuple[int, int, int | None, str | None]  # id, attempts, claim_gen, error

# `status = 'pending' AND attempts > 0` is the condition of the index events_retrying:
# written term for term, each read below walks the events that failed a try, not the
# whole backlog (:max is at least 1).
_EXHAUSTED = """SELECT 'exhausted', id, attempts, claim_gen, error FROM events
                WHERE inbox_id = :box AND status = 'pending' AND attempts > 0
                  AND attempts >= :max"""
_READY = """SELECT * FROM (SELECT 'retry', id, attempts, claim_gen, error FROM events
                           WHERE inbox_id = :box AND status = 'pending' AND attempts > 0
                             AND available_at <= :now ORDER BY id LIMIT 1) AS retry
            UNION ALL
            SELECT * FROM (SELECT 'fresh', id, attempts, claim_gen, error FROM events
                           WHERE inbox_id = :box AND status = 'pending'
                             AND available_at <= :now ORDER BY id LIMIT :batch) AS fresh"""
# Rows still running under an older generation lost their worker; with them, what
# the next steps look at, so that a claim with nothing to clean up reads once.
_CANDIDATES = f"""SELECT 'abandoned', id, attempts, claim_gen, error FROM events
                  WHERE inbox_id = :box AND status = 'running' AND claim_gen < :gen
                  UNION ALL {_EXHAUSTED} UNION ALL {_READY}"""


class NotNow(Exception):
    """A claim's ``unless`` read found something to do first: the claim was given up
    before anything was written."""


def _candidates(tx: Tx, query: str, **params: Any) -> dict[str, list[Candidate]]:
    """Candidate rows by kind, oldest first."""
    return _by_kind(tx.rows(query, **params))


def _by_kind(rows: list[Row]) -> dict[str, list[Candidate]]:
    found: dict[str, list[Candidate]] = {"abandoned": [], "exhausted": [], "retry": [],
                                         "fresh": []}
    for kind, event_id, attempts, claim_gen, error in rows:
        found[str(kind)].append((int(event_id), int(attempts),
                                 None if claim_gen is None else int(claim_gen), error))
    return found


def _requeue(tx: Tx, rows: list[Candidate], now: int, policy: Policy) -> None:
    """Abandoned rows go back to pending, retried after the backoff."""
    from agentbox.rules import inbox as rules

    updates = []
    for event_id, attempts, old, _ in rows:
        available_at, error = rules.abandoned(old, attempts, now, policy)
        updates.append({"id": event_id, "available_at": available_at, "error": error,
                        "now": now})
    tx.many("""UPDATE events SET status = 'pending', available_at = :available_at,
                   updated_at = :now, error = :error WHERE inbox_id = :box AND id = :id""",
            updates)
    history.record_many(tx, now, "event", "abandoned",
                        ((i, old, f"attempt {a} never finished") for i, a, old, _ in rows))


def _bury(tx: Tx, rows: list[Candidate], now: int, policy: Policy) -> None:
    """Pending rows out of attempts go dead (the threshold is the rule's)."""
    from agentbox.rules import inbox as rules

    exhausted = [(i, a, e) for i, a, _, e in rows if rules.out_of_attempts(a, policy)]
    if not exhausted:
        return
    tx.many("""UPDATE events SET status = 'dead', updated_at = :now, error = :error
               WHERE inbox_id = :box AND id = :id""",
            [{"id": i, "now": now, "error": rules.exhausted(a, e)} for i, a, e in exhausted])
    reason = rules.exhausted_reason(policy)
    history.record_many(tx, now, "event", "dead", ((i, None, reason) for i, _, _ in exhausted))


def _fenced(tx: Tx, lease: Lease | None, holder: str, generation: int, now: int,
            ids: Sequence[int]) -> dict[int, int] | None:
    """The attempts of each row, if the lease is still ours and every row is still
    running under our claim (stamped with our generation); else None."""
    if not holds(lease, holder, generation, now):
        return None
    unique = sorted(set(ids))
    if not unique:
        return {}
    chosen, params = among(unique)
    rows = tx.rows(f"""SELECT id, attempts FROM events WHERE inbox_id = :box AND id IN {chosen}
                       AND status = 'running' AND claim_gen = :gen""", gen=generation, **params)
    return {int(i): int(a) for i, a in rows} if len(rows) == len(unique) else None


# What rules.inbox.next_work needs of an inbox, in one query: a pending event
# available now (found by the index, without taking the minimum over a long
# queue), else the earliest; whether any is running; the next timer; the end of
# a pause; the lease.
_WORK = f"""
SELECT i.id,
       COALESCE((SELECT available_at FROM events e WHERE e.inbox_id = i.id
                 AND status = 'pending' AND available_at <= :now LIMIT 1),
                (SELECT MIN(available_at) FROM events e WHERE e.inbox_id = i.id
                 AND status = 'pending')),
       EXISTS (SELECT 1 FROM events e WHERE e.inbox_id = i.id AND status = 'running'),
       (SELECT MIN(due) FROM timers t WHERE t.inbox_id = i.id AND NOT done),
       (SELECT until FROM pauses p WHERE p.inbox_id = i.id AND kind IS NOT NULL),
       {LEASE_COLUMNS}
FROM inboxes i"""


def next_work_of(reader: Reader, boxes: Collection[int], now: int) -> dict[int, int]:
    """When a run next has something to do in each inbox of ``boxes`` that has anything
    scheduled (see :func:`agentbox.rules.inbox.next_work`), in one read."""
    from agentbox.rules import inbox as rules

    if not boxes:
        return {}
    chosen, params = among(sorted(boxes))
    found: dict[int, int] = {}
    for box, first, running, timer, paused, *lease in reader.rows(
            f"{_WORK} WHERE i.id IN {chosen}", now=now, **params):
        due = rules.next_work(None if first is None else int(first),
                              None if timer is None else int(timer), bool(running),
                              lease_of(tuple(lease)), now)
        if due is not None and paused is not None:  # a pause holds every run back
            due = max(due, int(paused))
        if due is not None:
            found[int(box)] = due
    return found


class Claimed(list[Event]):
    """A run's batch as claimed, its events oldest first, with what its handler is
    handed beside them, read under the claim's lock: each event's idempotency key
    (``keys``, by id) and the agent's state (``state``)."""

    def __init__(self, events: Sequence[Event], keys: dict[int, str], state: Version) -> None:
        super().__init__(events)
        self.keys = keys
        self.state = state


class Runs(Core):
    """A run's claim and its outcome, each one fenced transaction."""

    def claim(self, holder: str, generation: int, now: int, policy: Policy,
              unless: tuple[tuple[str, Params], Callable[[list[Row]], bool]] | None = None
              ) -> Claimed | None:
        """Claim one run's batch behind the fence; None when the lease is not ours.

        Events abandoned by an older generation go back to pending, those out of
        attempts go dead, then a retried event alone or up to ``max_batch``
        fresh ones are claimed, each attempt counted now. What the rules need is
        read once, with the keys' epochs and the state, in the message that takes
        the lock; only after requeueing or burying are the candidates read again.
        ``unless``: one more read sent in that message, and a test of its rows that
        gives the claim up (raising :class:`NotNow`) before the fence is looked at.
        """
        from agentbox.rules import inbox as rules

        params: dict[str, Any] = {"gen": generation, "now": now, "max": policy.max_attempts,
                                  "batch": policy.max_batch}
        extra = () if unless is None else (unless[0],)
        with self._locked_reading((_CANDIDATES, params), (EPOCHS, {}), (CURRENT, {}),
                                  *extra) as (tx, lease, (rows, epochs, state, *seen)):
            if unless is not None and unless[1](seen[0]):
                raise NotNow
            if not holds(lease, holder, generation, now):
                return None
            tx.run("UPDATE inboxes SET last_run = :now WHERE id = :box", now=now)
            found = _by_kind(rows)
            if found["abandoned"]:
                _requeue(tx, found["abandoned"], now, policy)
                found = _candidates(tx, f"{_EXHAUSTED} UNION ALL {_READY}", **params)
            if found["exhausted"]:
                _bury(tx, found["exhausted"], now, policy)
                found = _candidates(tx, _READY, **params)
            retry = found["retry"][0][0] if found["retry"] else None
            ids = rules.batch(retry, [i for i, *_ in found["fresh"]], policy)
            if not ids:
                return Claimed([], {}, current_of(state))
            # Each attempt is the one counted now, from the attempts read under the lock:
            # its story is written first, so that the claim itself goes with the COMMIT.
            attempts = {i: a for i, a, *_ in found["retry"] + found["fresh"]}
            history.record_many(tx, now, "event", "claimed",
                                ((i, generation, f"attempt {attempts[i] + 1}") for i in ids))
            chosen, marks = among(ids)
            claimed = tx.last(
                f"""UPDATE events SET status = 'running', attempts = attempts + 1,
                        claim_gen = :gen, updated_at = :now
                    WHERE inbox_id = :box AND id IN {chosen} RETURNING {COLUMNS}""",
                gen=generation, now=now, **marks)
            return Claimed(sorted((event_of(row) for row in claimed), key=lambda e: e.id),
                           keys_of(epochs, ids), current_of(state))

    def finish(self, holder: str, generation: int, now: int, ids: Sequence[int],
               answer: Answer | None = None, policy: Policy | None = None) -> bool:
        """Mark a run's events done and write everything its answer asks for, in one
        fenced transaction: a stale worker's finish changes nothing, and a finished
        event can never lose its reply or have one queued twice. False (and nothing
        written) when the lease or any event is no longer this run's; a bad answer
        raises and writes nothing. ``policy`` bounds the state (default: the defaults)."""

        from agentbox.ledger.approvals import request_in
        from agentbox.ledger.links import check_links_in
        from agentbox.ledger.outbox import queue_in
        from agentbox.ledger.pause import succeeded_in, usage_in
        from agentbox.ledger.state import change_in
        from agentbox.ledger.timers import add_in
        from agentbox.rules.answer import Answer

        answer = answer or Answer()
        with self._locked() as (tx, lease):
            mine = _fenced(tx, lease, holder, generation, now, ids)
            if mine is None:
                return False
            done = sorted(mine)
            chosen, params = among(done)
            tx.run(f"""UPDATE events SET status = 'done', error = NULL, updated_at = :now
                       WHERE inbox_id = :box AND id IN {chosen}""", now=now, **params)
            history.record_many(tx, now, "event", "finished",
                                ((i, generation, None) for i in done))
            queue_in(self.engine, tx, now, generation, answer.messages)
            for request in answer.approvals:
                request_in(tx, request.id, now, request.expires_in, request.action)
            if answer.messages:
                check_links_in(tx, answer, now)
            for follow_up in answer.timers:
                add_in(tx, follow_up.to_timer(now), now, replace=True)
            change_in(tx, answer.state, now, generation, policy)
            usage_in(tx, now, generation, done, answer.usage)
            succeeded_in(tx, now, generation)
            return True

    def fail(self, holder: str, generation: int, now: int, ids: Sequence[int], error: str,
             policy: Policy) -> bool:
        """Record a handler error: retry after the backoff, or dead on the last attempt.
        Fenced like :meth:`finish`."""
        from agentbox.ledger.pause import failed_in
        from agentbox.rules import inbox as rules

        with self._locked() as (tx, lease):
            mine = _fenced(tx, lease, holder, generation, now, ids)
            if mine is None:
                return False
            failed_in(tx, now, generation, sorted(mine), policy)
            for event_id, attempts in sorted(mine.items()):
                then = rules.after_failure(attempts, now, policy)
                tx.run("""UPDATE events SET status = :status, error = :error,
                              available_at = :available_at, updated_at = :now
                          WHERE inbox_id = :box AND id = :id""", status=then.status,
                       error=error, available_at=then.available_at, now=now, id=event_id)
                history.record(tx, now, "event", event_id, "failed", generation, error)
                if then.dead_reason is not None:
                    history.record(tx, now, "event", event_id, "dead", generation,
                                   then.dead_reason)
            return True

    def defer(self, holder: str, generation: int, now: int, ids: Sequence[int], error: str,
              policy: Policy) -> bool:
        """Record a handler's temporary failure (it exited 75): the attempts given back,
        the events pending after the wait :mod:`agentbox.rules.breaker` sets, never
        dead; the run counts towards the breaker. Fenced like :meth:`finish`."""
        from agentbox.ledger.pause import failed_in
        from agentbox.rules import breaker
        from agentbox.rules import inbox as rules

        with self._locked() as (tx, lease):
            mine = _fenced(tx, lease, holder, generation, now, ids)
            if mine is None:
                return False
            failed_in(tx, now, generation, sorted(mine), policy)
            available_at = breaker.tempfail_at(now, policy)
            tx.many("""UPDATE events SET status = 'pending', attempts = :attempts,
                           error = :error, available_at = :available_at, updated_at = :now
                       WHERE inbox_id = :box AND id = :id""",
                    [{"id": i, "attempts": rules.given_back(a), "error": error,
                      "available_at": available_at, "now": now}
                     for i, a in sorted(mine.items())])
            history.record_many(tx, now, "event", "deferred",
                                ((i, generation, f"{error}; attempt {a} given back")
                                 for i, a in sorted(mine.items())))
            return True

    def interrupt(self, holder: str, generation: int, now: int, ids: Sequence[int]) -> bool:
        """Give a stopped run's events back: pending again, the attempt given back.

        An asked-for stop (SIGTERM, Ctrl-C) is not the event's fault, so it
        never moves an event towards dead; the history says ``interrupted``.
        Fenced like :meth:`finish`.
        """
        from agentbox.rules import inbox as rules

        with self._locked() as (tx, lease):
            mine = _fenced(tx, lease, holder, generation, now, ids)
            if mine is None:
                return False
            tx.many("""UPDATE events SET status = 'pending', attempts = :attempts,
                           updated_at = :now WHERE inbox_id = :box AND id = :id""",
                    [{"id": i, "attempts": rules.given_back(a), "now": now}
                     for i, a in sorted(mine.items())])
            history.record_many(tx, now, "event", "interrupted",
                                ((i, generation, rules.interrupted(a))
                                 for i, a in sorted(mine.items())))
            return True

    def next_work(self, now: int) -> int | None:
        """When a run next has something to do here, or None when nothing is scheduled.

        A time at or before ``now`` means there is work now: a pending event
        is available or a timer is due. Otherwise the earliest of: a pending
        retry's ``available_at``, the next timer, and the end of the lease
        holding events that are still ``running``. Reads only.
        """
        reader = self._read()
        return next_work_of(reader, [reader.box], now).get(reader.box)
