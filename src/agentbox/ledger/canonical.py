"""Payloads stored before they were canonical per RFC 8785, rewritten in that form.

agentbox 0.2 stored a payload as sorted-keys ``json.dumps``: ``{"n":1.0}`` and
``{"n":100.0}`` where JCS writes ``{"n":1}`` and ``{"n":100}``. Until such a row
is rewritten, a redelivery spelled as it was is still a duplicate (the ingest
compares the 0.2 spelling too), but one spelled otherwise would be a conflict.
The rewrite walks an inbox's events by id, :data:`STEP` rows per transaction,
from ``inboxes.canonical_from`` on, so a big inbox never holds its lock for
long and an interrupted walk goes on where it stopped; ``prune`` (and so
``run``'s daily prune) drives it. A payload JCS cannot write (an integer beyond
±(2**53 - 1)) keeps its old spelling.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbox.ledger.core import Core

if TYPE_CHECKING:
    from agentbox.ledger.engine import Tx

STEP = 500


def _respelled(text: str) -> str | None:
    """The JCS spelling of a stored payload, or None when it has it already (or none)."""
    import json

    from agentbox.errors import BadInput
    from agentbox.jsonutil import canonical

    try:
        new = canonical(json.loads(text))
    except (BadInput, ValueError, RecursionError):
        return None
    return None if new == text else new


def _timers(tx: Tx) -> None:
    rows = tx.rows("SELECT name, payload FROM timers WHERE inbox_id = :box")
    tx.many("UPDATE timers SET payload = :payload WHERE inbox_id = :box AND name = :name",
            [{"name": name, "payload": new} for name, payload in rows
             if (new := _respelled(str(payload))) is not None])


class Canonicalise(Core):
    """Rewriting old payloads in their canonical form, a bounded step at a time."""

    def canonicalise_step(self, limit: int = STEP) -> int | None:
        """Rewrite the payloads of the next ``limit`` events in their JCS spelling (and,
        in the first step, every timer's); how many changed, None once none is left."""
        with self._locked() as (tx, _):
            row = tx.one("SELECT canonical_from FROM inboxes WHERE id = :box")
            if row is None or row[0] is None:
                return None
            start = int(row[0])
            if start == 0:
                _timers(tx)
            rows = tx.rows("""SELECT id, payload FROM events WHERE inbox_id = :box
                              AND id >= :start ORDER BY id LIMIT :limit""",
                           start=start, limit=limit)
            changed = [{"id": int(i), "payload": new} for i, payload in rows
                       if (new := _respelled(str(payload))) is not None]
            tx.many("UPDATE events SET payload = :payload WHERE inbox_id = :box AND id = :id",
                    changed)
            following = int(rows[-1][0]) + 1 if len(rows) == limit else None
            tx.run("UPDATE inboxes SET canonical_from = :following WHERE id = :box",
                   following=following)
            return len(changed)
