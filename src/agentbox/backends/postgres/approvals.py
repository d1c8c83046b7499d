"""The approvals of one inbox; deadlines and outcomes are decided in
:mod:`agentbox.rules.approvals`."""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from agentbox.backends.postgres import history, inbox, timers
from agentbox.backends.postgres.db import Box, Tx
from agentbox.backends.postgres.lease import locked
from agentbox.rules import approvals as rules
from agentbox.rules.approvals import Approval


def request_in(tx: Tx, request_id: str, now: int, expires_in: int, action: str) -> bool:
    """Record a request inside the caller's transaction; False if it already exists."""
    rules.check_request(request_id, expires_in)
    added = tx.read(
        """INSERT INTO approvals (inbox_id, id, action, requested_at, expires_at)
           VALUES (%s, %s, %s, %s, %s) ON CONFLICT (inbox_id, id) DO NOTHING RETURNING id""",
        (tx.id, request_id, action, now, now + expires_in)).fetchone() is not None
    if not added:
        return False
    timers.add_in(tx, rules.expiry_timer(request_id, now, expires_in, action), now,
                  replace=True)
    history.record(tx, now, "approval", request_id, "requested", detail=action)
    return True


def request(conn: Connection[Any], box_id: int, request_id: str, now: int, expires_in: int,
            action: str) -> bool:
    with locked(conn, box_id) as (tx, _):
        return request_in(tx, request_id, now, expires_in, action)


def answer(conn: Connection[Any], box_id: int, request_id: str, reply: str, now: int) -> str:
    """Store a reply unless the deadline passed; return the outcome that stands."""
    rules.check_reply(reply)
    with locked(conn, box_id) as (tx, _):
        row = tx.read("""SELECT action, expires_at FROM approvals
                         WHERE inbox_id = %s AND id = %s""", (box_id, request_id)).fetchone()
        if row is None:
            return "unknown"
        action, expires_at = row
        body = rules.event_body(request_id, rules.outcome(reply, now, expires_at), action)
        result = inbox.store_in(tx, rules.SOURCE, request_id, body, now, record_conflict=False)
        stored = inbox.get(tx, result.id)
        assert stored is not None
        standing = rules.standing(stored.payload)
        history.record(tx, now, "approval", request_id, "answered",
                       detail=f"{reply} -> {standing}")
        return standing


def listing(box: Box, now: int) -> list[Approval]:
    rows = box.read(
        """SELECT a.id, a.action, a.requested_at, a.expires_at, e.payload, e.created_at
           FROM approvals a
           LEFT JOIN events e ON e.inbox_id = a.inbox_id AND e.source = %s
                              AND e.source_id = a.id
           WHERE a.inbox_id = %s ORDER BY a.requested_at, a.id""",
        (rules.SOURCE, box.id)).fetchall()
    return [Approval(rid, action, requested, expires, rules.listed(payload, now, expires),
                     answered)
            for rid, action, requested, expires, payload, answered in rows]
