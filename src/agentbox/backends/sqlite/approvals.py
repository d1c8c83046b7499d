"""The approvals table of one SQLite inbox; deadlines and outcomes are decided in
:mod:`agentbox.rules.approvals`."""

from __future__ import annotations

import sqlite3

from agentbox.backends.sqlite import history, inbox, timers
from agentbox.backends.sqlite.db import write
from agentbox.rules import approvals as rules
from agentbox.rules.approvals import Approval


def request_in(conn: sqlite3.Connection, request_id: str, now: int, expires_in: int,
               action: str) -> bool:
    """Record a request inside the caller's transaction; False if it already exists."""
    rules.check_request(request_id, expires_in)
    added = conn.execute(
        """INSERT INTO approvals (id, action, requested_at, expires_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (id) DO NOTHING""",
        (request_id, action, now, now + expires_in)).rowcount > 0
    if not added:
        return False
    timers.add_in(conn, rules.expiry_timer(request_id, now, expires_in, action), now,
                  replace=True)
    history.record(conn, now, "approval", request_id, "requested", detail=action)
    return True


def request(conn: sqlite3.Connection, request_id: str, now: int, expires_in: int,
            action: str) -> bool:
    with write(conn):
        return request_in(conn, request_id, now, expires_in, action)


def answer(conn: sqlite3.Connection, request_id: str, reply: str, now: int) -> str:
    """Store a reply unless the deadline passed; return the outcome that stands."""
    rules.check_reply(reply)
    with write(conn):
        row = conn.execute("SELECT action, expires_at FROM approvals WHERE id = ?",
                           (request_id,)).fetchone()
        if row is None:
            return "unknown"
        action, expires_at = row
        body = rules.event_body(request_id, rules.outcome(reply, now, expires_at), action)
        result = inbox.store_in(conn, rules.SOURCE, request_id, body, now,
                                record_conflict=False)
        stored = conn.execute("SELECT payload FROM events WHERE id = ?",
                              (result.id,)).fetchone()[0]
        standing = rules.standing(stored)
        history.record(conn, now, "approval", request_id, "answered",
                       detail=f"{reply} -> {standing}")
        return standing


def listing(conn: sqlite3.Connection, now: int) -> list[Approval]:
    rows = conn.execute(
        """SELECT a.id, a.action, a.requested_at, a.expires_at, e.payload, e.created_at
           FROM approvals a
           LEFT JOIN events e ON e.source = ? AND e.source_id = a.id
           ORDER BY a.requested_at, a.id""", (rules.SOURCE,)).fetchall()
    return [Approval(rid, action, requested, expires, rules.listed(payload, now, expires),
                     answered)
            for rid, action, requested, expires, payload, answered in rows]
