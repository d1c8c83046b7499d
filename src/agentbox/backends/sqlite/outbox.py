"""The outbox and dispatches tables of one SQLite inbox.

When held messages may go out, what a sender's word means and how a claim
ends are decided in :mod:`agentbox.rules.outbox`; this module claims and
settles rows inside ``BEGIN IMMEDIATE`` transactions. Every try of a
dispatch has a number; a settle names the try it speaks for, so a dispatcher
that comes back after another took over its expired claim cannot undo the
newer try.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agentbox.backends.sqlite import history
from agentbox.backends.sqlite.db import instance_id, write
from agentbox.errors import BadInput, NotAsAsked
from agentbox.rules import outbox as rules
from agentbox.rules.answer import Message
from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.records import OPEN_OUTBOX_STATES, SendOutcome


def queue_in(conn: sqlite3.Connection, now: int, generation: int | None,
             messages: Sequence[Message]) -> list[int]:
    """Hold a run's messages, inside its finish transaction."""
    ids = [conn.execute(
        """INSERT INTO outbox (body, urgent, generation, created_at) VALUES (?, ?, ?, ?)
           RETURNING id""", (m.body, int(m.urgent), generation, now)).fetchone()[0]
        for m in messages]
    history.record_many(conn, now, "message", "queued", ((i, generation, None) for i in ids))
    return ids


def _message_ids(conn: sqlite3.Connection, key: str) -> tuple[int, ...]:
    rows = conn.execute("SELECT id FROM outbox WHERE dispatch_key = ? ORDER BY id", (key,))
    return tuple(r[0] for r in rows.fetchall())


def _set_rows(conn: sqlite3.Connection, key: str, state: str, error: str | None = None,
              sent_at: int | None = None) -> tuple[int, ...]:
    """Move a dispatch's rows to ``state``; held rows leave the dispatch."""
    ids = _message_ids(conn, key)
    conn.execute(
        """UPDATE outbox SET state = ?, error = ?, sent_at = COALESCE(?, sent_at),
               dispatch_key = CASE WHEN ? = 'held' THEN NULL ELSE dispatch_key END
           WHERE dispatch_key = ?""", (state, error, sent_at, state, key))
    return ids


def _finish(conn: sqlite3.Connection, key: str, state: str, now: int,
            error: str | None = None) -> None:
    conn.execute("UPDATE dispatches SET state = ?, finished_at = ?, error = ? WHERE key = ?",
                 (state, now, error, key))


def _mark_sent(conn: sqlite3.Connection, key: str, now: int, sent_at: int,
               detail: str | None = None) -> None:
    _finish(conn, key, "sent", now)
    ids = _set_rows(conn, key, "sent", sent_at=sent_at)
    history.record(conn, now, "dispatch", key, "sent", detail=detail)
    history.record_many(conn, now, "message", "sent", ((i, None, key) for i in ids))


def _park(conn: sqlite3.Connection, key: str, now: int, error: str) -> None:
    """At-most-once with the outcome unknown: never resent until an operator says."""
    _finish(conn, key, "uncertain", now, error)
    ids = _set_rows(conn, key, "uncertain", error)
    history.record(conn, now, "dispatch", key, "uncertain", detail=error)
    history.record_many(conn, now, "message", "uncertain", ((i, None, key) for i in ids))


def _expired(conn: sqlite3.Connection, now: int) -> list[tuple[str, str, str, int, int, int]]:
    """Claims still ``sending`` past their deadline (key, mode, body, urgent, tries,
    max_tries): their dispatcher is gone, or a failed try's backoff is over."""
    rows = conn.execute(
        """SELECT key, mode, body, urgent, tries, max_tries FROM dispatches
           WHERE state = 'sending' AND deadline < ? ORDER BY seq""", (now,)).fetchall()
    return [(str(k), str(m), str(b), int(u), int(t), int(n)) for k, m, b, u, t, n in rows]


def _park_expired(conn: sqlite3.Connection,
                  now: int) -> list[tuple[str, str, str, int, int, int]]:
    """Park the expired claims that may not be tried again; return the others
    (key, mode, body, urgent, tries, max_tries), oldest first."""
    left = []
    for key, mode, body, urgent, tries, max_tries in _expired(conn, now):
        if rules.on_expiry(mode, tries, max_tries) == "resend":
            left.append((key, mode, body, urgent, tries, max_tries))
        else:
            _park(conn, key, now, rules.expiry_reason(mode, tries, max_tries))
    return left


def _take_over(conn: sqlite3.Connection, now: int, timeout: int) -> Dispatch | None:
    """Park what may not be tried again; take over the oldest claim that may."""
    left = _park_expired(conn, now)
    if not left:
        return None
    key, mode, body, urgent, tries, max_tries = left[0]
    deadline = rules.claim_deadline(now, timeout)
    conn.execute("UPDATE dispatches SET tries = ?, deadline = ?, claimed_at = ? WHERE key = ?",
                 (tries + 1, deadline, now, key))
    ids = _message_ids(conn, key)
    history.record(conn, now, "dispatch", key, "resending",
                   detail=rules.resend_detail(tries + 1, max_tries))
    history.record_many(conn, now, "message", "resending", ((i, None, key) for i in ids))
    return Dispatch(key, mode, body, ids, bool(urgent), tries + 1, deadline, max_tries)


def last_send(conn: sqlite3.Connection) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here.

    Failed sends (certainly not delivered) and dispatches an operator
    resolved as unsent do not count.
    """
    marks = ",".join("?" * len(rules.SPOKE_STATES))
    row = conn.execute(f"SELECT MAX(claimed_at) FROM dispatches WHERE state IN ({marks})",
                       rules.SPOKE_STATES).fetchone()
    return None if row[0] is None else int(row[0])


def _in_flight(conn: sqlite3.Connection) -> tuple[int, int | None]:
    row = conn.execute("SELECT COUNT(*), MIN(deadline) FROM dispatches "
                       "WHERE state = 'sending'").fetchone()
    return int(row[0]), None if row[1] is None else int(row[1])


def claim(conn: sqlite3.Connection, now: int, mode: str, gap: int, timeout: int,
          max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Dispatch | Wait:
    """Claim the next dispatch (a resend first), or say why there is none.

    ``mode`` and ``max_tries`` are recorded on a new claim; a resend keeps those
    of its claim.
    """
    rules.check_claim(mode, gap, timeout, max_tries)
    with write(conn):
        resend = _take_over(conn, now, timeout)
        if resend is not None:
            return resend
        held = conn.execute("SELECT id, body, urgent FROM outbox WHERE state = 'held' "
                            "ORDER BY id").fetchall()
        last = last_send(conn)
        flags = [bool(u) for _, _, u in held]
        if not rules.may_send(flags, last, gap, now):
            return Wait(len(held), rules.next_allowed(last, gap), *_in_flight(conn))
        urgent = any(flags)
        # AUTOINCREMENT never reuses a number, so the key is never reused either.
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'dispatches'").fetchone()
        seq = (row[0] if row else 0) + 1
        key = rules.dispatch_key(instance_id(conn), seq)
        body = rules.merged([b for _, b, _ in held])
        deadline = rules.claim_deadline(now, timeout)
        conn.execute(
            """INSERT INTO dispatches (seq, key, mode, body, urgent, claimed_at, deadline,
                                       max_tries) VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            (seq, key, mode, body, int(urgent), now, deadline, max_tries))
        ids = tuple(i for i, _, _ in held)
        conn.executemany("UPDATE outbox SET state = 'sending', dispatch_key = ? WHERE id = ?",
                         [(key, i) for i in ids])
        history.record(conn, now, "dispatch", key, "claimed",
                       detail=f"{len(ids)} message(s), {mode}{', urgent' if urgent else ''}")
        history.record_many(conn, now, "message", "sending", ((i, None, key) for i in ids))
        return Dispatch(key, mode, body, ids, urgent, 1, deadline, max_tries)


def settle(conn: sqlite3.Connection, key: str, outcome: SendOutcome, now: int,
           error: str | None = None, *, attempt: int) -> bool:
    """Record the sender's word for try ``attempt``; False when it changed nothing.

    A settle for a try that is no longer current (settled already, parked as
    uncertain, or taken over by another dispatcher) is refused, except for
    ``sent``: a certain delivery settles the dispatch whichever try made it.
    """
    with write(conn):
        row = conn.execute("SELECT state, mode, tries, max_tries FROM dispatches WHERE key = ?",
                           (key,)).fetchone()
        if row is None:
            return False
        tries, max_tries = int(row[2]), int(row[3])
        action = rules.on_settle(str(row[0]), str(row[1]), tries, attempt, outcome, max_tries)
        if action == "stale":
            return False
        if action == "late-sent":
            _mark_sent(conn, key, now, now, detail=f"late word from try {attempt}")
        elif action == "sent":
            _mark_sent(conn, key, now, now)
        elif action == "failed":
            _finish(conn, key, "failed", now, error)
            ids = _set_rows(conn, key, "held", error)
            history.record(conn, now, "dispatch", key, "failed", detail=error)
            history.record_many(conn, now, "message", "held again",
                                ((i, None, error) for i in ids))
        elif action == "retry":
            # An earlier try may have delivered: the rows stay under this key.
            conn.execute("UPDATE dispatches SET error = ?, deadline = ? WHERE key = ?",
                         (error, rules.resend_after(now, tries), key))
            _note_error(conn, key, error)
            history.record(conn, now, "dispatch", key, "failed",
                           detail=rules.retry_detail(tries, max_tries, error))
        elif action == "park":
            _park(conn, key, now, rules.park_reason(str(row[1]), error, tries, max_tries))
        else:
            # at-least-once: the claim stays; the next dispatch after its deadline
            # resends the same rows under the same key.
            conn.execute("UPDATE dispatches SET error = ? WHERE key = ?", (error, key))
            _note_error(conn, key, error)
            history.record(conn, now, "dispatch", key, "unknown", detail=error)
        return True


def _note_error(conn: sqlite3.Connection, key: str, error: str | None) -> None:
    """The sender's word on the messages of a key that keeps them."""
    conn.execute("UPDATE outbox SET error = ? WHERE dispatch_key = ?", (error, key))


def resolve(conn: sqlite3.Connection, key: str, sent: bool, now: int) -> int:
    """An operator's verdict on an uncertain dispatch; unsent rows are held again.

    Returns how many messages it covered.
    """
    with write(conn):
        _park_expired(conn, now)
        row = conn.execute("SELECT state, claimed_at FROM dispatches WHERE key = ?",
                           (key,)).fetchone()
        if row is None:
            raise BadInput(f"no dispatch with key {key!r}")
        if row[0] != "uncertain":
            raise NotAsAsked(f"dispatch {key} is {row[0]}, not uncertain; nothing to resolve")
        verdict = "sent" if sent else "unsent"
        _finish(conn, key, verdict, now)
        # A send the operator confirms happened when it was claimed.
        ids = _set_rows(conn, key, "sent" if sent else "held",
                        sent_at=int(row[1]) if sent else None)
        history.record(conn, now, "dispatch", key, "resolved", detail=verdict)
        history.record_many(conn, now, "message", "sent" if sent else "held again",
                            ((i, None, f"resolved {verdict}: {key}") for i in ids))
        return len(ids)


def listing(conn: sqlite3.Connection, states: Sequence[str] = OPEN_OUTBOX_STATES,
            limit: int = 1000) -> list[OutboxMessage]:
    """Messages in ``states``, oldest first; past ``limit``, the newest ones."""
    marks = ",".join("?" * len(states))
    rows = conn.execute(
        f"""SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error
            FROM outbox WHERE state IN ({marks}) ORDER BY id DESC LIMIT ?""",
        [*states, limit]).fetchall()
    return [OutboxMessage(i, b, bool(u), s, k, c, t, e)
            for i, b, u, s, k, c, t, e in reversed(rows)]
