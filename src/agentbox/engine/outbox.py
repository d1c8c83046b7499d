"""The paced outbox: held messages go out merged, at most once per gap.

A send never holds the write lock while the sender runs. :func:`claim`
marks the rows ``sending`` under a dispatch key that stays the same if the
dispatch is retried, with a claim deadline; the caller runs the sender; then
:func:`settle` records what the sender said. A dispatch whose outcome is not
known (the sender was killed, timed out, or the dispatcher died) is resent
under the same key once its deadline passes in ``at-least-once`` mode, and
parked as ``uncertain`` for an operator in ``at-most-once`` mode.
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
from agentbox.errors import BadInput, NotAsAsked

SEPARATOR = "\n\n"
CLAIM_GRACE = 30  # seconds past the send timeout before a claim counts as abandoned

Outcome = Literal["sent", "failed", "unknown"]


@dataclass(frozen=True)
class Dispatch:
    key: str
    mode: str
    body: str
    message_ids: tuple[int, ...]
    urgent: bool
    tries: int
    deadline: int


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
    """Nothing was claimed; ``until`` is when the gap allows the next send."""

    held: int
    until: int | None


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


def _set_rows(conn: sqlite3.Connection, key: str, state: str, now: int,
              error: str | None = None) -> None:
    conn.execute(
        """UPDATE outbox SET state = ?, error = ?,
               sent_at = CASE WHEN ? = 'sent' THEN ? ELSE sent_at END,
               dispatch_key = CASE WHEN ? = 'held' THEN NULL ELSE dispatch_key END
           WHERE dispatch_key = ?""", (state, error, state, now, state, key))


def _settle_abandoned(conn: sqlite3.Connection, now: int,
                      timeout: int) -> Dispatch | None:
    """Claims past their deadline: resend one (at-least-once), park the rest."""
    resend: Dispatch | None = None
    for key, mode, body, urgent, tries in conn.execute(
            """SELECT key, mode, body, urgent, tries FROM dispatches
               WHERE state = 'sending' AND deadline < ? ORDER BY seq""", (now,)).fetchall():
        if mode == "at-most-once":
            conn.execute("UPDATE dispatches SET state = 'uncertain', finished_at = ? "
                         "WHERE key = ?", (now, key))
            _set_rows(conn, key, "uncertain", now, "dispatcher died or timed out mid-send")
            history.record(conn, now, "dispatch", key, "uncertain",
                           detail="claim deadline passed with the outcome unknown")
        elif resend is None:
            deadline = now + timeout + CLAIM_GRACE
            conn.execute("UPDATE dispatches SET tries = tries + 1, deadline = ?, "
                         "claimed_at = ? WHERE key = ?", (deadline, now, key))
            history.record(conn, now, "dispatch", key, "resending", detail=f"try {tries + 1}")
            resend = Dispatch(key, mode, body, _message_ids(conn, key), bool(urgent),
                              tries + 1, deadline)
    return resend


def last_send(conn: sqlite3.Connection) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here."""
    row = conn.execute("""SELECT MAX(claimed_at) FROM dispatches
                          WHERE state IN ('sending', 'sent', 'uncertain')""").fetchone()
    return None if row[0] is None else int(row[0])


def claim(conn: sqlite3.Connection, now: int, mode: str, gap: int,
          timeout: int) -> Dispatch | Wait:
    """Claim the next dispatch, or say why there is none."""
    if mode not in DELIVERY_MODES:
        raise BadInput(f"delivery mode must be one of {', '.join(DELIVERY_MODES)}")
    with write(conn):
        resend = _settle_abandoned(conn, now, timeout)
        if resend is not None:
            return resend
        held = conn.execute("SELECT id, body, urgent FROM outbox WHERE state = 'held' "
                            "ORDER BY id").fetchall()
        last = last_send(conn)
        allowed = None if last is None else last + gap
        urgent = any(u for _, _, u in held)
        if not held or (not urgent and allowed is not None and now < allowed):
            return Wait(len(held), allowed)
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
           error: str | None = None) -> bool:
    """Record the sender's word; False if the dispatch was already settled elsewhere."""
    with write(conn):
        row = conn.execute("SELECT state, mode FROM dispatches WHERE key = ?",
                           (key,)).fetchone()
        if row is None or row[0] != "sending":
            return False
        mode = row[1]
        if outcome == "sent":
            conn.execute("UPDATE dispatches SET state = 'sent', finished_at = ?, error = NULL "
                         "WHERE key = ?", (now, key))
            _set_rows(conn, key, "sent", now)
        elif outcome == "failed":
            conn.execute("UPDATE dispatches SET state = 'failed', finished_at = ?, error = ? "
                         "WHERE key = ?", (now, error, key))
            _set_rows(conn, key, "held", now, error)
        elif mode == "at-most-once":
            conn.execute("UPDATE dispatches SET state = 'uncertain', finished_at = ?, error = ? "
                         "WHERE key = ?", (now, error, key))
            _set_rows(conn, key, "uncertain", now, error)
        else:
            # at-least-once: leave the claim in place; the next dispatch after its
            # deadline resends the same rows under the same key.
            conn.execute("UPDATE dispatches SET error = ? WHERE key = ?", (error, key))
        history.record(conn, now, "dispatch", key, outcome, detail=error)
        return True


def resolve(conn: sqlite3.Connection, key: str, sent: bool, now: int) -> int:
    """An operator's verdict on an uncertain dispatch; unsent rows are held again."""
    with write(conn):
        row = conn.execute("SELECT state FROM dispatches WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise BadInput(f"no dispatch with key {key!r}")
        if row[0] != "uncertain":
            raise NotAsAsked(f"dispatch {key} is {row[0]}, not uncertain; nothing to resolve")
        count = len(_message_ids(conn, key))
        conn.execute("UPDATE dispatches SET state = ?, finished_at = ? WHERE key = ?",
                     ("sent" if sent else "unsent", now, key))
        _set_rows(conn, key, "sent" if sent else "held", now)
        history.record(conn, now, "dispatch", key, "resolved",
                       detail="sent" if sent else "unsent")
        return count


def listing(conn: sqlite3.Connection, states: Sequence[str] = ("held", "sending", "uncertain"),
            limit: int = 1000) -> list[OutboxMessage]:
    marks = ",".join("?" * len(states))
    rows = conn.execute(
        f"""SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error
            FROM outbox WHERE state IN ({marks}) ORDER BY id LIMIT ?""",
        [*states, limit]).fetchall()
    return [OutboxMessage(i, b, bool(u), s, k, c, t, e) for i, b, u, s, k, c, t, e in rows]


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT state, n FROM state_counts WHERE tbl = 'outbox'").fetchall()
    found = {state: int(n) for state, n in rows}
    return {state: found.get(state, 0) for state in ("held", "sending", "sent", "uncertain")}
