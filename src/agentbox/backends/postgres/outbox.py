"""The outbox and dispatches of one box.

When held messages may go out, what a sender's word means and how a claim
ends are decided in :mod:`agentbox.rules.outbox`; this module claims and
settles rows inside transactions holding the box lock, so two dispatchers
on two hosts never claim the same messages. Every try of a dispatch has a
number; a settle names the try it speaks for, so a dispatcher that comes
back after another took over its expired claim cannot undo the newer try.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres import history
from agentbox.backends.postgres.db import instance_id
from agentbox.backends.postgres.lease import locked
from agentbox.errors import BadInput, NotAsAsked
from agentbox.rules import outbox as rules
from agentbox.rules.answer import Message
from agentbox.rules.records import OPEN_OUTBOX_STATES, Dispatch, OutboxMessage, SendOutcome, Wait


def queue_in(conn: Connection[Any], box: int, now: int, generation: int | None,
             messages: Sequence[Message]) -> list[int]:
    """Hold a run's messages, inside its finish transaction."""
    if not messages:
        return []
    rows = conn.execute(
        """INSERT INTO outbox (inbox_id, body, urgent, generation, created_at)
           SELECT %s, body, urgent, %s, %s FROM unnest(%s::text[], %s::boolean[])
               WITH ORDINALITY AS m (body, urgent, n) ORDER BY n
           RETURNING id""",
        (box, generation, now, [m.body for m in messages],
         [m.urgent for m in messages])).fetchall()
    ids = sorted(int(r[0]) for r in rows)
    history.record_many(conn, box, now, "message", "queued",
                        ((i, generation, None) for i in ids))
    return ids


def _message_ids(conn: Connection[Any], box: int, key: str) -> tuple[int, ...]:
    rows = conn.execute("""SELECT id FROM outbox WHERE inbox_id = %s AND dispatch_key = %s
                           ORDER BY id""", (box, key))
    return tuple(int(r[0]) for r in rows.fetchall())


def _set_rows(conn: Connection[Any], box: int, key: str, state: str,
              error: str | None = None, sent_at: int | None = None) -> tuple[int, ...]:
    """Move a dispatch's rows to ``state``; held rows leave the dispatch."""
    rows = conn.execute(
        """UPDATE outbox SET state = %(state)s, error = %(error)s,
               sent_at = COALESCE(%(sent_at)s, sent_at),
               dispatch_key = CASE WHEN %(state)s = 'held' THEN NULL ELSE dispatch_key END
           WHERE inbox_id = %(inbox)s AND dispatch_key = %(key)s RETURNING id""",
        {"state": state, "error": error, "sent_at": sent_at, "inbox": box, "key": key})
    return tuple(sorted(int(r[0]) for r in rows.fetchall()))


def _finish(conn: Connection[Any], box: int, key: str, state: str, now: int,
            error: str | None = None) -> None:
    conn.execute("""UPDATE dispatches SET state = %s, finished_at = %s, error = %s
                    WHERE inbox_id = %s AND key = %s""", (state, now, error, box, key))


def _mark_sent(conn: Connection[Any], box: int, key: str, now: int, sent_at: int,
               detail: str | None = None) -> None:
    _finish(conn, box, key, "sent", now)
    ids = _set_rows(conn, box, key, "sent", sent_at=sent_at)
    history.record(conn, box, now, "dispatch", key, "sent", detail=detail)
    history.record_many(conn, box, now, "message", "sent", ((i, None, key) for i in ids))


def _park(conn: Connection[Any], box: int, key: str, now: int, error: str) -> None:
    """At-most-once with the outcome unknown: never resent until an operator says."""
    _finish(conn, box, key, "uncertain", now, error)
    ids = _set_rows(conn, box, key, "uncertain", error)
    history.record(conn, box, now, "dispatch", key, "uncertain", detail=error)
    history.record_many(conn, box, now, "message", "uncertain", ((i, None, key) for i in ids))


def _expired(conn: Connection[Any], box: int, now: int,
             mode: str) -> list[tuple[str, str, str, bool, int]]:
    """Claims of ``mode`` still ``sending`` past their deadline: their dispatcher is gone."""
    rows = conn.execute(
        """SELECT key, mode, body, urgent, tries FROM dispatches
           WHERE inbox_id = %s AND state = 'sending' AND deadline < %s AND mode = %s
           ORDER BY seq""", (box, now, mode)).fetchall()
    return [(str(k), str(m), str(b), bool(u), int(t)) for k, m, b, u, t in rows]


def _park_expired(conn: Connection[Any], box: int, now: int) -> None:
    for key, *_ in _expired(conn, box, now, "at-most-once"):
        _park(conn, box, key, now, "claim deadline passed with the outcome unknown")


def _take_over(conn: Connection[Any], box: int, now: int, timeout: int) -> Dispatch | None:
    """Park expired at-most-once claims; take over the oldest expired at-least-once one."""
    _park_expired(conn, box, now)
    expired = _expired(conn, box, now, "at-least-once")
    if not expired:
        return None
    key, mode, body, urgent, tries = expired[0]
    deadline = rules.claim_deadline(now, timeout)
    conn.execute("""UPDATE dispatches SET tries = %s, deadline = %s, claimed_at = %s
                    WHERE inbox_id = %s AND key = %s""",
                 (tries + 1, deadline, now, box, key))
    ids = _message_ids(conn, box, key)
    history.record(conn, box, now, "dispatch", key, "resending",
                   detail=f"try {tries + 1}: the claim deadline passed with the outcome unknown")
    history.record_many(conn, box, now, "message", "resending", ((i, None, key) for i in ids))
    return Dispatch(key, mode, body, ids, urgent, tries + 1, deadline)


def last_send(conn: Connection[Any], box: int) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here.

    Failed sends (certainly not delivered) and dispatches an operator
    resolved as unsent do not count.
    """
    row = conn.execute("""SELECT MAX(claimed_at) FROM dispatches
                          WHERE inbox_id = %s AND state = ANY(%s)""",
                       (box, list(rules.SPOKE_STATES))).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _in_flight(conn: Connection[Any], box: int) -> tuple[int, int | None]:
    row = conn.execute("""SELECT COUNT(*), MIN(deadline) FROM dispatches
                          WHERE inbox_id = %s AND state = 'sending'""", (box,)).fetchone()
    assert row is not None
    return int(row[0]), None if row[1] is None else int(row[1])


def claim(conn: Connection[Any], box: int, now: int, mode: str, gap: int,
          timeout: int) -> Dispatch | Wait:
    """Claim the next dispatch (a resend first), or say why there is none.

    ``mode`` is recorded on a new claim; a resend keeps the mode of its claim.
    """
    rules.check_claim(mode, gap, timeout)
    with locked(conn, box):
        resend = _take_over(conn, box, now, timeout)
        if resend is not None:
            return resend
        held = conn.execute("""SELECT id, body, urgent FROM outbox
                               WHERE inbox_id = %s AND state = 'held' ORDER BY id""",
                            (box,)).fetchall()
        last = last_send(conn, box)
        flags = [bool(u) for _, _, u in held]
        if not rules.may_send(flags, last, gap, now):
            return Wait(len(held), rules.next_allowed(last, gap), *_in_flight(conn, box))
        urgent = any(flags)
        row = conn.execute("""UPDATE inboxes SET dispatch_seq = dispatch_seq + 1
                              WHERE id = %s RETURNING dispatch_seq""", (box,)).fetchone()
        assert row is not None
        key = rules.dispatch_key(instance_id(conn, box), int(row[0]))
        body = rules.merged([str(b) for _, b, _ in held])
        deadline = rules.claim_deadline(now, timeout)
        conn.execute(
            """INSERT INTO dispatches (inbox_id, seq, key, mode, body, urgent, claimed_at,
                                       deadline) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
            (box, int(row[0]), key, mode, body, urgent, now, deadline))
        ids = tuple(int(i) for i, _, _ in held)
        conn.execute("""UPDATE outbox SET state = 'sending', dispatch_key = %s
                        WHERE inbox_id = %s AND id = ANY(%s)""", (key, box, list(ids)))
        history.record(conn, box, now, "dispatch", key, "claimed",
                       detail=f"{len(ids)} message(s), {mode}{', urgent' if urgent else ''}")
        history.record_many(conn, box, now, "message", "sending", ((i, None, key) for i in ids))
        return Dispatch(key, mode, body, ids, urgent, 1, deadline)


def settle(conn: Connection[Any], box: int, key: str, outcome: SendOutcome, now: int,
           error: str | None = None, *, attempt: int) -> bool:
    """Record the sender's word for try ``attempt``; False when it changed nothing.

    A settle for a try that is no longer current (settled already, parked as
    uncertain, or taken over by another dispatcher) is refused, except for
    ``sent``: a certain delivery settles the dispatch whichever try made it.
    """
    with locked(conn, box):
        row = conn.execute("""SELECT state, mode, tries FROM dispatches
                              WHERE inbox_id = %s AND key = %s""", (box, key)).fetchone()
        if row is None:
            return False
        action = rules.on_settle(str(row[0]), str(row[1]), int(row[2]), attempt, outcome)
        if action == "stale":
            return False
        if action == "late-sent":
            _mark_sent(conn, box, key, now, now, detail=f"late word from try {attempt}")
        elif action == "sent":
            _mark_sent(conn, box, key, now, now)
        elif action == "failed":
            _finish(conn, box, key, "failed", now, error)
            ids = _set_rows(conn, box, key, "held", error)
            history.record(conn, box, now, "dispatch", key, "failed", detail=error)
            history.record_many(conn, box, now, "message", "held again",
                                ((i, None, error) for i in ids))
        elif action == "park":
            _park(conn, box, key, now, error or "outcome unknown")
        else:
            # at-least-once: the claim stays; the next dispatch after its deadline
            # resends the same rows under the same key.
            conn.execute("UPDATE dispatches SET error = %s WHERE inbox_id = %s AND key = %s",
                         (error, box, key))
            conn.execute("UPDATE outbox SET error = %s WHERE inbox_id = %s AND dispatch_key = %s",
                         (error, box, key))
            history.record(conn, box, now, "dispatch", key, "unknown", detail=error)
        return True


def resolve(conn: Connection[Any], box: int, key: str, sent: bool, now: int) -> int:
    """An operator's verdict on an uncertain dispatch; unsent rows are held again.

    Returns how many messages it covered.
    """
    with locked(conn, box):
        _park_expired(conn, box, now)
        row = conn.execute("""SELECT state, claimed_at FROM dispatches
                              WHERE inbox_id = %s AND key = %s""", (box, key)).fetchone()
        if row is None:
            raise BadInput(f"no dispatch with key {key!r}")
        if row[0] != "uncertain":
            raise NotAsAsked(f"dispatch {key} is {row[0]}, not uncertain; nothing to resolve")
        verdict = "sent" if sent else "unsent"
        _finish(conn, box, key, verdict, now)
        # A send the operator confirms happened when it was claimed.
        ids = _set_rows(conn, box, key, "sent" if sent else "held",
                        sent_at=int(row[1]) if sent else None)
        history.record(conn, box, now, "dispatch", key, "resolved", detail=verdict)
        history.record_many(conn, box, now, "message", "sent" if sent else "held again",
                            ((i, None, f"resolved {verdict}: {key}") for i in ids))
        return len(ids)


def listing(conn: Connection[Any], box: int, states: Sequence[str] = OPEN_OUTBOX_STATES,
            limit: int = 1000) -> list[OutboxMessage]:
    """Messages in ``states``, oldest first; past ``limit``, the newest ones."""
    rows = conn.execute(
        """SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error
           FROM outbox WHERE inbox_id = %s AND state = ANY(%s) ORDER BY id DESC LIMIT %s""",
        (box, list(states), limit)).fetchall()
    return [OutboxMessage(*row) for row in reversed(rows)]
