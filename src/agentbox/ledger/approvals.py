"""Deferred approvals that expire; deadlines and outcomes are decided in
:mod:`agentbox.rules.approvals`.

A request writes a one-off expiry timer whose event uses the approval's own
key, so the answer and the expiry compete for one inbox row: only one outcome
is ever stored, and an answer checks the deadline itself, in its transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbox.ledger import history
from agentbox.ledger.core import Core
from agentbox.ledger.inbox import store_in
from agentbox.ledger.timers import add_in

if TYPE_CHECKING:
    from agentbox.ledger.engine import Tx
    from agentbox.rules.approvals import Approval


def request_in(tx: Tx, request_id: str, now: int, expires_in: int, action: str) -> bool:
    """Record a request inside the caller's transaction; False if it already exists."""
    from agentbox.rules import approvals as rules

    rules.check_request(request_id, expires_in)
    added = tx.one("""INSERT INTO approvals (inbox_id, id, action, requested_at, expires_at)
                      VALUES (:box, :id, :action, :now, :expires_at)
                      ON CONFLICT DO NOTHING RETURNING id""",
                   id=request_id, action=action, now=now, expires_at=now + expires_in)
    if added is None:
        return False
    add_in(tx, rules.expiry_timer(request_id, now, expires_in, action), now, replace=True)
    history.record(tx, now, "approval", request_id, "requested", detail=action)
    return True


class Approvals(Core):
    """Requests that expire, and the one outcome each ends in."""

    def request_approval(self, request_id: str, now: int, expires_in: int,
                         action: str) -> bool:
        """Record a request and its expiry timer; False if the id was requested before."""
        with self._locked() as (tx, _):
            return request_in(tx, request_id, now, expires_in, action)

    def answer_approval(self, request_id: str, reply: str, now: int) -> str:
        """Answer yes or no; returns the outcome that stands (yes, no, expired, unknown)."""
        from agentbox.rules import approvals as rules

        rules.check_reply(reply)
        with self._locked() as (tx, _):
            row = tx.one("""SELECT action, expires_at FROM approvals
                            WHERE inbox_id = :box AND id = :id""", id=request_id)
            if row is None:
                return "unknown"
            action, expires_at = str(row[0]), int(row[1])
            body = rules.event_body(request_id, rules.outcome(reply, now, expires_at), action)
            result = store_in(self.engine, tx, rules.SOURCE, request_id, body, now,
                              record_conflict=False)
            stored = tx.one("SELECT payload FROM events WHERE inbox_id = :box AND id = :id",
                            id=result.id)
            assert stored is not None  # stored now, or found under its key: in this transaction
            standing = rules.standing(str(stored[0]))
            history.record(tx, now, "approval", request_id, "answered",
                           detail=rules.answered_detail(reply, standing))
            return standing

    def approvals(self, now: int) -> list[Approval]:
        """Every request with its outcome as of ``now``."""
        return self._approvals_where("", now)

    def pending_approvals(self, now: int, limit: int = 100) -> list[Approval]:
        """The requests still waiting for an answer at ``now``, soonest deadline first."""
        return self._approvals_where("AND e.payload IS NULL AND a.expires_at > :now", now,
                                     order="a.expires_at, a.id LIMIT :limit", limit=limit)

    def approval(self, request_id: str, now: int) -> Approval | None:
        """One request with its outcome as of ``now``; None if it was never made."""
        found = self._approvals_where("AND a.id = :id", now, id=request_id)
        return found[0] if found else None

    def _approvals_where(self, where: str, now: int, order: str = "a.requested_at, a.id",
                         **params: object) -> list[Approval]:
        from agentbox.rules import approvals as rules
        from agentbox.rules.approvals import Approval

        rows = self._read().rows(
            f"""SELECT a.id, a.action, a.requested_at, a.expires_at, e.payload, e.created_at
               FROM approvals a
               LEFT JOIN events e ON e.inbox_id = a.inbox_id AND e.source = :source
                                  AND e.source_id = a.id
               WHERE a.inbox_id = :box {where} ORDER BY {order}""", source=rules.SOURCE,
            now=now, **params)
        return [Approval(str(rid), str(action), int(requested), int(expires),
                         rules.listed(payload, now, int(expires)),
                         None if answered is None else int(answered))
                for rid, action, requested, expires, payload, answered in rows]
