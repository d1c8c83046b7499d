"""Deferred approvals that expire.

A request writes a one-off expiry timer whose event uses the approval's own
key ('approval', id), so the answer and the expiry compete for one inbox row
and only one of them is ever stored. The answer path checks the deadline
itself, in the same transaction, instead of trusting that the scheduler ran.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from agentbox.engine import history, inbox, timers
from agentbox.engine.answer import TimerSpec
from agentbox.engine.db import write
from agentbox.errors import BadInput
from agentbox.jsonutil import canonical

SOURCE = "approval"
ANSWERS = ("yes", "no")


@dataclass(frozen=True)
class Approval:
    id: str
    action: str
    requested_at: int
    expires_at: int
    outcome: str  # pending | yes | no | expired
    answered_at: int | None


def expiry_timer_name(request_id: str) -> str:
    return f"expire:{request_id}"


def request_in(conn: sqlite3.Connection, request_id: str, now: int, expires_in: int,
               action: str) -> bool:
    """Record a request inside the caller's transaction; False if it already exists."""
    inbox.check_key(SOURCE, request_id)
    if expires_in <= 0:
        raise BadInput("an approval must expire a positive number of seconds from now")
    added = conn.execute(
        """INSERT INTO approvals (id, action, requested_at, expires_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (id) DO NOTHING""",
        (request_id, action, now, now + expires_in)).rowcount > 0
    if not added:
        return False
    expiry = canonical({"approval": request_id, "answer": "expired", "action": action})
    timers.add_in(conn, TimerSpec(name=expiry_timer_name(request_id), due=now + expires_in,
                                  every=None, payload=expiry, event_source=SOURCE,
                                  event_id=request_id), now, replace=True)
    history.record(conn, now, "approval", request_id, "requested", detail=action)
    return True


def request(conn: sqlite3.Connection, request_id: str, now: int, expires_in: int,
            action: str) -> bool:
    with write(conn):
        return request_in(conn, request_id, now, expires_in, action)


def answer(conn: sqlite3.Connection, request_id: str, reply: str, now: int) -> str:
    """Store a reply unless the deadline passed; return the outcome that stands:
    'yes', 'no', 'expired', or 'unknown' for a request never made."""
    if reply not in ANSWERS:
        raise BadInput(f"an approval answer is yes or no, not {reply!r}")
    with write(conn):
        row = conn.execute("SELECT action, expires_at FROM approvals WHERE id = ?",
                           (request_id,)).fetchone()
        if row is None:
            return "unknown"
        action, expires_at = row
        outcome = "expired" if now >= expires_at else reply
        body = canonical({"approval": request_id, "answer": outcome, "action": action})
        result = inbox.store_in(conn, SOURCE, request_id, body, now, record_conflict=False)
        stored = json.loads(conn.execute("SELECT payload FROM events WHERE id = ?",
                                         (result.id,)).fetchone()[0])
        # The key may hold an event that is not an answer (ingested by hand).
        found = stored.get("answer")
        standing = found if found in (*ANSWERS, "expired") else "unknown"
        history.record(conn, now, "approval", request_id, "answered",
                       detail=f"{reply} -> {standing}")
        return standing


def listing(conn: sqlite3.Connection, now: int) -> list[Approval]:
    rows = conn.execute(
        """SELECT a.id, a.action, a.requested_at, a.expires_at,
                  json_extract(e.payload, '$.answer'), e.created_at
           FROM approvals a
           LEFT JOIN events e ON e.source = 'approval' AND e.source_id = a.id
           ORDER BY a.requested_at, a.id""").fetchall()
    return [Approval(rid, action, requested, expires,
                     outcome or ("expired" if now >= expires else "pending"), answered)
            for rid, action, requested, expires, outcome, answered in rows]
