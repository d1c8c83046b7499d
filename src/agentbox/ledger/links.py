"""Approval links: the inbox's secret that signs them, and what a token leads to.

The secret lives in the inbox's row, so every process serving the inbox
(``serve`` on any host, ``approve list``, a dispatcher) signs and checks with
the same one, and a backup keeps links working. It is made on first need;
:meth:`Links.rotate_links` replaces it, and every earlier link is then
refused. Checking a token never writes: an inbox without a secret has no
valid link. Tokens and placeholders are :mod:`agentbox.rules.links`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from agentbox.ledger import history
from agentbox.ledger.approvals import Approvals
from agentbox.ledger.core import among

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader, Tx
    from agentbox.rules.answer import Answer
    from agentbox.rules.approvals import Approval


def _secret(reader: Reader | Tx) -> bytes | None:
    row = reader.one("SELECT link_secret FROM inboxes WHERE id = :box")
    return None if row is None or row[0] is None else bytes.fromhex(str(row[0]))


def pending_of(tx: Tx, ids: Collection[str], now: int) -> set[str]:
    """Which of ``ids`` are approvals still waiting for an answer at ``now``."""
    from agentbox.rules import approvals as rules

    chosen, params = among(sorted(ids))
    rows = tx.rows(f"""SELECT a.id, a.expires_at, e.payload FROM approvals a
                       LEFT JOIN events e ON e.inbox_id = a.inbox_id AND e.source = :source
                                          AND e.source_id = a.id
                       WHERE a.inbox_id = :box AND a.id IN {chosen}""",
                   source=rules.SOURCE, **params)
    return {str(i) for i, expires, payload in rows
            if rules.listed(payload, now, int(expires)) == "pending"}


def check_links_in(tx: Tx, answer: Answer, now: int) -> None:
    """Inside a finish: every ``{approval:ID}`` of its messages names an approval the
    answer requests or one still pending (BadInput otherwise, nothing written)."""
    from agentbox.rules.links import check_placeholders

    check_placeholders((m.body for m in answer.messages), {a.id for a in answer.approvals},
                       lambda ids: pending_of(tx, ids, now))


class Links(Approvals):
    """The secret behind an inbox's approval links, and the approvals they lead to."""

    def link_secret(self) -> bytes:
        """The inbox's link secret, made (once, whoever asks first) if it has none."""
        found = _secret(self._read())
        if found is not None:
            return found
        import secrets

        from agentbox.rules.links import SECRET_BYTES

        with self._write() as tx:
            tx.run("UPDATE inboxes SET link_secret = :secret WHERE id = :box "
                   "AND link_secret IS NULL", secret=secrets.token_hex(SECRET_BYTES))
            made = _secret(tx)
        assert made is not None
        return made

    def rotate_links(self, now: int) -> None:
        """A new secret: every link handed out before is refused from now on."""
        import secrets

        from agentbox.rules.links import SECRET_BYTES

        with self._write() as tx:
            tx.run("UPDATE inboxes SET link_secret = :secret WHERE id = :box",
                   secret=secrets.token_hex(SECRET_BYTES))
            history.record(tx, now, "approval", "*", "links rotated")

    def approval_token(self, user: str, approval: Approval) -> str:
        from agentbox.rules.links import token

        return token(self.link_secret(), user, approval.id, approval.expires_at)

    def approval_of_token(self, user: str, link_token: str, now: int) -> Approval | None:
        """The approval a token of ``user``'s inbox leads to, as it stands at ``now``;
        None for anything this inbox's current secret did not sign (forged, altered,
        rotated, another inbox's), or whose approval is gone. Writes nothing."""
        from agentbox.rules import links

        found = links.claims(link_token)
        secret = _secret(self._read())
        if found is None or secret is None or found[0] != user \
                or not links.verify(secret, link_token):
            return None
        approval = self.approval(found[1], now)
        if approval is None or approval.expires_at != found[2]:
            return None
        return approval

    def link_csrf(self, link_token: str) -> str:
        """The form token of a link's page (see :func:`agentbox.rules.links.csrf`)."""
        from agentbox.rules.links import csrf

        return csrf(self.link_secret(), link_token)

    def check_link_csrf(self, link_token: str, given: str | None) -> bool:
        from agentbox.rules.links import check_csrf

        secret = _secret(self._read())
        return secret is not None and check_csrf(secret, link_token, given)

    def linked_body(self, body: str, user: str, public_url: str | None, now: int) -> str:
        """A message body as it is sent: each ``{approval:ID}`` replaced by its link
        (without ``public_url``, by the command that answers it)."""
        from agentbox.rules import links

        if not links.placeholder_ids(body):
            return body

        def link_of(approval_id: str) -> str | None:
            approval = self.approval(approval_id, now)
            if approval is None:
                return None
            if public_url is None:
                return links.without_link(approval_id)
            return links.url(public_url, self.approval_token(user, approval))

        return links.substitute(body, link_of)
