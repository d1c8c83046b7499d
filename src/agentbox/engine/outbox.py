"""The paced outbox: held messages go out merged, at most once per gap.

A send never holds the write lock while the sender runs. :func:`claim`
marks the rows ``sending`` under a dispatch key that stays the same if the
dispatch is retried, with a claim deadline; the caller runs the sender; then
:func:`settle` records what the sender said. A dispatch whose outcome is not
known (the sender was killed, timed out, or the dispatcher died) is resent
under the same key once its deadline passes in ``at-least-once`` mode, and
parked as ``uncertain`` for an operator in ``at-most-once`` mode.

Every try of a dispatch has a number; a settle names the try it speaks for,
so a dispatcher that comes back after another one took over its expired
claim cannot undo the newer try. Only its certain "delivered" still counts:
the channel has the message whichever try brought it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentbox.engine import history
from agentbox.engine.answer import Message
from agentbox.engine.db import instance_id, write
from agentbox.engine.policy import DELIVERY_MODES
from agentbox.engine.schema import OUTBOX_STATES
from agentbox.errors import BadInput, NotAsAsked

SEPARATOR = "\n\n"
CLAIM_GRACE = 30  # seconds past the send timeout before a claim counts as abandoned
STATES = OUTBOX_STATES
OPEN_STATES = ("held", "sending", "uncertain")

Outcome = Literal["sent", "failed", "unknown"]


@dataclass(frozen=True)
class Dispatch:
    """A claimed send: these rows, merged into ``body``, under ``key``, try ``tries``."""

    key: str
    mode: str
    body: str
    message_ids: tuple[int, ...]
    urgent: bool
    tries: int
    deadline: int

    @property
    def resend(self) -> bool:
        return self.tries > 1


@dataclass(frozen=True)
class OutboxMessage:
    id: int
    body: str
    urgent: bool
    state: str
    dispatch_key: str | None
    created_at: int
    sent_at: int | None
    error: str | None


@dataclass(frozen=True)
class Wait:
    """Nothing was claimed.

    ``until`` is when the gap allows the next send (None: no send yet);
    ``in_flight`` counts claims still inside their deadline, the earliest of
    which is ``in_flight_until``.
    """

    held: int
    until: int | None
    in_flight: int = 0
    in_flight_until: int | None = None


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


def _expired(conn: sqlite3.Connection, now: int,
             mode: str | None = None) -> list[tuple[str, str, str, int, int]]:
    """Claims still ``sending`` past their deadline: their dispatcher is gone."""
    rows = conn.execute(
        """SELECT key, mode, body, urgent, tries FROM dispatches
           WHERE state = 'sending' AND deadline < ? AND (? IS NULL OR mode = ?)
           ORDER BY seq""", (now, mode, mode)).fetchall()
    return [(str(k), str(m), str(b), int(u), int(t)) for k, m, b, u, t in rows]


def _park_expired(conn: sqlite3.Connection, now: int) -> None:
    for key, *_ in _expired(conn, now, "at-most-once"):
        _park(conn, key, now, "claim deadline passed with the outcome unknown")


def _take_over(conn: sqlite3.Connection, now: int, timeout: int) -> Dispatch | None:
    """Park expired at-most-once claims; take over the oldest expired at-least-once one."""
    _park_expired(conn, now)
    expired = _expired(conn, now, "at-least-once")
    if not expired:
        return None
    key, mode, body, urgent, tries = expired[0]
    deadline = now + timeout + CLAIM_GRACE
    conn.execute("UPDATE dispatches SET tries = ?, deadline = ?, claimed_at = ? WHERE key = ?",
                 (tries + 1, deadline, now, key))
    ids = _message_ids(conn, key)
    history.record(conn, now, "dispatch", key, "resending",
                   detail=f"try {tries + 1}: the claim deadline passed with the outcome unknown")
    history.record_many(conn, now, "message", "resending", ((i, None, key) for i in ids))
    return Dispatch(key, mode, body, ids, bool(urgent), tries + 1, deadline)


def last_send(conn: sqlite3.Connection) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here.

    Failed sends (certainly not delivered) and dispatches an operator
    resolved as unsent do not count.
    """
    row = conn.execute("""SELECT MAX(claimed_at) FROM dispatches
                          WHERE state IN ('sending', 'sent', 'uncertain')""").fetchone()
    return None if row[0] is None else int(row[0])


def _in_flight(conn: sqlite3.Connection) -> tuple[int, int | None]:
    row = conn.execute("SELECT COUNT(*), MIN(deadline) FROM dispatches "
                       "WHERE state = 'sending'").fetchone()
    return int(row[0]), None if row[1] is None else int(row[1])


def claim(conn: sqlite3.Connection, now: int, mode: str, gap: int,
          timeout: int) -> Dispatch | Wait:
    """Claim the next dispatch (a resend first), or say why there is none.

    ``mode`` is recorded on a new claim; a resend keeps the mode of its claim.
    """
    if mode not in DELIVERY_MODES:
        raise BadInput(f"delivery mode must be one of {', '.join(DELIVERY_MODES)}")
    if gap < 0 or timeout <= 0:
        raise BadInput("the gap cannot be negative and the timeout must be positive")
    with write(conn):
        resend = _take_over(conn, now, timeout)
        if resend is not None:
            return resend
        held = conn.execute("SELECT id, body, urgent FROM outbox WHERE state = 'held' "
                            "ORDER BY id").fetchall()
        last = last_send(conn)
        allowed = None if last is None else last + gap
        urgent = any(u for _, _, u in held)
        if not held or (not urgent and allowed is not None and now < allowed):
            return Wait(len(held), allowed, *_in_flight(conn))
        # AUTOINCREMENT never reuses a number, so the key is never reused either.
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'dispatches'").fetchone()
        seq = (row[0] if row else 0) + 1
        key = f"{instance_id(conn)}-{seq}"
        body = SEPARATOR.join(b for _, b, _ in held)
        deadline = now + timeout + CLAIM_GRACE
        conn.execute(
            """INSERT INTO dispatches (seq, key, mode, body, urgent, claimed_at, deadline)
               VALUES (?, ?, ?, ?, ?, ?, ?)""", (seq, key, mode, body, int(urgent), now, deadline))
        ids = tuple(i for i, _, _ in held)
        conn.executemany("UPDATE outbox SET state = 'sending', dispatch_key = ? WHERE id = ?",
                         [(key, i) for i in ids])
        history.record(conn, now, "dispatch", key, "claimed",
                       detail=f"{len(ids)} message(s), {mode}{', urgent' if urgent else ''}")
        history.record_many(conn, now, "message", "sending", ((i, None, key) for i in ids))
        return Dispatch(key, mode, body, ids, urgent, 1, deadline)


def settle(conn: sqlite3.Connection, key: str, outcome: Outcome, now: int,
           error: str | None = None, *, attempt: int) -> bool:
    """Record the sender's word for try ``attempt``; False when it changed nothing.

    A settle for a try that is no longer current (settled already, parked as
    uncertain, or taken over by another dispatcher) is refused, except for
    ``sent``: a certain delivery settles the dispatch whichever try made it.
    """
    if outcome not in ("sent", "failed", "unknown"):
        raise BadInput(f"unknown dispatch outcome {outcome!r}")
    with write(conn):
        row = conn.execute("SELECT state, mode, tries FROM dispatches WHERE key = ?",
                           (key,)).fetchone()
        if row is None:
            return False
        state, mode, tries = str(row[0]), str(row[1]), int(row[2])
        if state != "sending" or tries != attempt:
            if outcome == "sent" and state in ("sending", "uncertain"):
                _mark_sent(conn, key, now, now, detail=f"late word from try {attempt}")
                return True
            return False
        if outcome == "sent":
            _mark_sent(conn, key, now, now)
        elif outcome == "failed":
            _finish(conn, key, "failed", now, error)
            ids = _set_rows(conn, key, "held", error)
            history.record(conn, now, "dispatch", key, "failed", detail=error)
            history.record_many(conn, now, "message", "held again",
                                ((i, None, error) for i in ids))
        elif mode == "at-most-once":
            _park(conn, key, now, error or "outcome unknown")
        else:
            # at-least-once: the claim stays; the next dispatch after its deadline
            # resends the same rows under the same key.
            conn.execute("UPDATE dispatches SET error = ? WHERE key = ?", (error, key))
            conn.execute("UPDATE outbox SET error = ? WHERE dispatch_key = ?", (error, key))
            history.record(conn, now, "dispatch", key, "unknown", detail=error)
        return True


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


def listing(conn: sqlite3.Connection, states: Sequence[str] = OPEN_STATES,
            limit: int = 1000) -> list[OutboxMessage]:
    """Messages in ``states``, oldest first; past ``limit``, the newest ones."""
    marks = ",".join("?" * len(states))
    rows = conn.execute(
        f"""SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error
            FROM outbox WHERE state IN ({marks}) ORDER BY id DESC LIMIT ?""",
        [*states, limit]).fetchall()
    return [OutboxMessage(i, b, bool(u), s, k, c, t, e)
            for i, b, u, s, k, c, t, e in reversed(rows)]
