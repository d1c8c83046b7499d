"""The outbox and dispatches of one inbox.

When held messages may go out, what a sender's word means and how a claim
ends are decided in :mod:`agentbox.rules.outbox`; this module claims and
settles rows inside transactions holding the inbox lock, so two dispatchers
on two hosts never claim the same messages. Every try of a dispatch has a
number; a settle names the try it speaks for, so a dispatcher that comes
back after another took over its expired claim cannot undo the newer try.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres import history
from agentbox.backends.postgres.db import Box, Tx
from agentbox.backends.postgres.lease import locked
from agentbox.errors import BadInput, NotAsAsked
from agentbox.rules import outbox as rules
from agentbox.rules.answer import Message
from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.records import OPEN_OUTBOX_STATES, SendOutcome


def queue_in(tx: Tx, now: int, generation: int | None,
             messages: Sequence[Message]) -> list[int]:
    """Hold a run's messages, inside its finish transaction."""
    if not messages:
        return []
    rows = tx.read(
        """INSERT INTO outbox (inbox_id, body, urgent, generation, created_at)
           SELECT %s, body, urgent, %s, %s FROM unnest(%s::text[], %s::boolean[])
               WITH ORDINALITY AS m (body, urgent, n) ORDER BY n
           RETURNING id""",
        (tx.id, generation, now, [m.body for m in messages],
         [m.urgent for m in messages])).fetchall()
    ids = sorted(int(r[0]) for r in rows)
    history.record_many(tx, now, "message", "queued", ((i, generation, None) for i in ids))
    return ids


def _message_ids(tx: Tx, key: str) -> tuple[int, ...]:
    rows = tx.read("""SELECT id FROM outbox WHERE inbox_id = %s AND dispatch_key = %s
                      ORDER BY id""", (tx.id, key))
    return tuple(int(r[0]) for r in rows.fetchall())


def _set_rows(tx: Tx, key: str, state: str, error: str | None = None,
              sent_at: int | None = None) -> tuple[int, ...]:
    """Move a dispatch's rows to ``state``; held rows leave the dispatch."""
    rows = tx.read(
        """UPDATE outbox SET state = %(state)s, error = %(error)s,
               sent_at = COALESCE(%(sent_at)s, sent_at),
               dispatch_key = CASE WHEN %(state)s = 'held' THEN NULL ELSE dispatch_key END
           WHERE inbox_id = %(box)s AND dispatch_key = %(key)s RETURNING id""",
        {"state": state, "error": error, "sent_at": sent_at, "box": tx.id, "key": key})
    return tuple(sorted(int(r[0]) for r in rows.fetchall()))


def _finish(tx: Tx, key: str, state: str, now: int, error: str | None = None) -> None:
    tx.write("""UPDATE dispatches SET state = %s, finished_at = %s, error = %s
                WHERE inbox_id = %s AND key = %s""", (state, now, error, tx.id, key))


def _mark_sent(tx: Tx, key: str, now: int, sent_at: int, detail: str | None = None) -> None:
    _finish(tx, key, "sent", now)
    ids = _set_rows(tx, key, "sent", sent_at=sent_at)
    history.record(tx, now, "dispatch", key, "sent", detail=detail)
    history.record_many(tx, now, "message", "sent", ((i, None, key) for i in ids))


def _park(tx: Tx, key: str, now: int, error: str) -> None:
    """At-most-once with the outcome unknown: never resent until an operator says."""
    _finish(tx, key, "uncertain", now, error)
    ids = _set_rows(tx, key, "uncertain", error)
    history.record(tx, now, "dispatch", key, "uncertain", detail=error)
    history.record_many(tx, now, "message", "uncertain", ((i, None, key) for i in ids))


Expired = tuple[str, str, str, bool, int, int]  # key, mode, body, urgent, tries, max_tries


def _park_expired(tx: Tx, now: int) -> list[Expired]:
    """Park the claims past their deadline (their dispatcher is gone, or a failed
    try's backoff is over) that may not be tried again; the others, oldest first."""
    left: list[Expired] = []
    for key, mode, body, urgent, tries, max_tries in tx.read(
            """SELECT key, mode, body, urgent, tries, max_tries FROM dispatches
               WHERE inbox_id = %s AND state = 'sending' AND deadline < %s
               ORDER BY seq""", (tx.id, now)).fetchall():
        if rules.on_expiry(mode, tries, max_tries) == "resend":
            left.append((str(key), str(mode), str(body), bool(urgent), int(tries),
                         int(max_tries)))
        else:
            _park(tx, str(key), now, rules.expiry_reason(mode, tries, max_tries))
    return left


def _take_over(tx: Tx, now: int, timeout: int) -> Dispatch | None:
    """Park what may not be tried again; take over the oldest claim that may."""
    left = _park_expired(tx, now)
    if not left:
        return None
    key, mode, body, urgent, tries, max_tries = left[0]
    deadline = rules.claim_deadline(now, timeout)
    tx.write("""UPDATE dispatches SET tries = %s, deadline = %s, claimed_at = %s
                WHERE inbox_id = %s AND key = %s""", (tries + 1, deadline, now, tx.id, key))
    ids = _message_ids(tx, key)
    history.record(tx, now, "dispatch", key, "resending",
                   detail=rules.resend_detail(tries + 1, max_tries))
    history.record_many(tx, now, "message", "resending", ((i, None, key) for i in ids))
    return Dispatch(key, mode, body, ids, urgent, tries + 1, deadline, max_tries)


def last_send(tx: Tx) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here.

    Failed sends (certainly not delivered) and dispatches an operator
    resolved as unsent do not count.
    """
    row = tx.read("""SELECT MAX(claimed_at) FROM dispatches
                     WHERE inbox_id = %s AND state = ANY(%s)""",
                  (tx.id, list(rules.SPOKE_STATES))).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _in_flight(tx: Tx) -> tuple[int, int | None]:
    row = tx.read("""SELECT COUNT(*), MIN(deadline) FROM dispatches
                     WHERE inbox_id = %s AND state = 'sending'""", (tx.id,)).fetchone()
    assert row is not None
    return int(row[0]), None if row[1] is None else int(row[1])


def claim(conn: Connection[Any], box_id: int, now: int, mode: str, gap: int, timeout: int,
          max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Dispatch | Wait:
    """Claim the next dispatch (a resend first), or say why there is none.

    ``mode`` and ``max_tries`` are recorded on a new claim; a resend keeps those
    of its claim.
    """
    rules.check_claim(mode, gap, timeout, max_tries)
    with locked(conn, box_id) as (tx, _):
        resend = _take_over(tx, now, timeout)
        if resend is not None:
            return resend
        held = tx.read("""SELECT id, body, urgent FROM outbox
                          WHERE inbox_id = %s AND state = 'held' ORDER BY id""",
                       (box_id,)).fetchall()
        last = last_send(tx)
        flags = [bool(u) for _, _, u in held]
        if not rules.may_send(flags, last, gap, now):
            return Wait(len(held), rules.next_allowed(last, gap), *_in_flight(tx))
        urgent = any(flags)
        row = tx.read("""UPDATE inboxes SET dispatch_seq = dispatch_seq + 1
                         WHERE id = %s RETURNING dispatch_seq, instance""", (box_id,)).fetchone()
        assert row is not None
        seq, instance = int(row[0]), str(row[1])
        key = rules.dispatch_key(instance, seq)
        body = rules.merged([str(b) for _, b, _ in held])
        deadline = rules.claim_deadline(now, timeout)
        tx.write("""INSERT INTO dispatches (inbox_id, seq, key, mode, body, urgent, claimed_at,
                                           deadline, max_tries)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                 (box_id, seq, key, mode, body, urgent, now, deadline, max_tries))
        ids = tuple(int(i) for i, _, _ in held)
        tx.write("""UPDATE outbox SET state = 'sending', dispatch_key = %s
                    WHERE inbox_id = %s AND id = ANY(%s)""", (key, box_id, list(ids)))
        history.record(tx, now, "dispatch", key, "claimed",
                       detail=f"{len(ids)} message(s), {mode}{', urgent' if urgent else ''}")
        history.record_many(tx, now, "message", "sending", ((i, None, key) for i in ids))
        return Dispatch(key, mode, body, ids, urgent, 1, deadline, max_tries)


def settle(conn: Connection[Any], box_id: int, key: str, outcome: SendOutcome, now: int,
           error: str | None = None, *, attempt: int) -> bool:
    """Record the sender's word for try ``attempt``; False when it changed nothing.

    A settle for a try that is no longer current (settled already, parked as
    uncertain, or taken over by another dispatcher) is refused, except for
    ``sent``: a certain delivery settles the dispatch whichever try made it.
    """
    with locked(conn, box_id) as (tx, _):
        row = tx.read("""SELECT state, mode, tries, max_tries FROM dispatches
                         WHERE inbox_id = %s AND key = %s""", (box_id, key)).fetchone()
        if row is None:
            return False
        mode, tries, max_tries = str(row[1]), int(row[2]), int(row[3])
        action = rules.on_settle(str(row[0]), mode, tries, attempt, outcome, max_tries)
        if action == "stale":
            return False
        if action == "late-sent":
            _mark_sent(tx, key, now, now, detail=f"late word from try {attempt}")
        elif action == "sent":
            _mark_sent(tx, key, now, now)
        elif action == "failed":
            _finish(tx, key, "failed", now, error)
            ids = _set_rows(tx, key, "held", error)
            history.record(tx, now, "dispatch", key, "failed", detail=error)
            history.record_many(tx, now, "message", "held again",
                                ((i, None, error) for i in ids))
        elif action == "retry":
            # An earlier try may have delivered: the rows stay under this key.
            tx.write("""UPDATE dispatches SET error = %s, deadline = %s
                        WHERE inbox_id = %s AND key = %s""",
                     (error, rules.resend_after(now, tries), box_id, key))
            _note_error(tx, key, error)
            history.record(tx, now, "dispatch", key, "failed",
                           detail=rules.retry_detail(tries, max_tries, error))
        elif action == "park":
            _park(tx, key, now, rules.park_reason(mode, error, tries, max_tries))
        else:
            # at-least-once: the claim stays; the next dispatch after its deadline
            # resends the same rows under the same key.
            tx.write("UPDATE dispatches SET error = %s WHERE inbox_id = %s AND key = %s",
                     (error, box_id, key))
            _note_error(tx, key, error)
            history.record(tx, now, "dispatch", key, "unknown", detail=error)
        return True


def _note_error(tx: Tx, key: str, error: str | None) -> None:
    """The sender's word on the messages of a key that keeps them."""
    tx.write("UPDATE outbox SET error = %s WHERE inbox_id = %s AND dispatch_key = %s",
             (error, tx.id, key))


def resolve(conn: Connection[Any], box_id: int, key: str, sent: bool, now: int) -> int:
    """An operator's verdict on an uncertain dispatch; unsent rows are held again.

    Returns how many messages it covered.
    """
    with locked(conn, box_id) as (tx, _):
        _park_expired(tx, now)
        row = tx.read("""SELECT state, claimed_at FROM dispatches
                         WHERE inbox_id = %s AND key = %s""", (box_id, key)).fetchone()
        if row is None:
            raise BadInput(f"no dispatch with key {key!r}")
        if row[0] != "uncertain":
            raise NotAsAsked(f"dispatch {key} is {row[0]}, not uncertain; nothing to resolve")
        verdict = "sent" if sent else "unsent"
        _finish(tx, key, verdict, now)
        # A send the operator confirms happened when it was claimed.
        ids = _set_rows(tx, key, "sent" if sent else "held",
                        sent_at=int(row[1]) if sent else None)
        history.record(tx, now, "dispatch", key, "resolved", detail=verdict)
        history.record_many(tx, now, "message", "sent" if sent else "held again",
                            ((i, None, f"resolved {verdict}: {key}") for i in ids))
        return len(ids)


def listing(box: Box, states: Sequence[str] = OPEN_OUTBOX_STATES,
            limit: int = 1000) -> list[OutboxMessage]:
    """Messages in ``states``, oldest first; past ``limit``, the newest ones."""
    rows = box.read(
        """SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error
           FROM outbox WHERE inbox_id = %s AND state = ANY(%s) ORDER BY id DESC LIMIT %s""",
        (box.id, list(states), limit)).fetchall()
    return [OutboxMessage(*row) for row in reversed(rows)]
