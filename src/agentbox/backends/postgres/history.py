"""The append-only story of every event, message and dispatch, per inbox.

Each writer records its transitions here inside its own transaction, so the
story can never disagree with the state it describes. An event's first line,
``stored``, is its row itself (``created_at``): the event and that line are
one write, and a million events cost a million fewer history rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentbox.backends.postgres.db import Box, Tx
from agentbox.rules.records import Entry

_INSERT = "INSERT INTO history (inbox_id, at, subject, subject_id, action, generation, detail)"


def record(tx: Tx, now: int, subject: str, subject_id: object, action: str,
           generation: int | None = None, detail: str | None = None) -> None:
    record_many(tx, now, subject, action, [(subject_id, generation, detail)])


def record_many(tx: Tx, now: int, subject: str, action: str,
                entries: Iterable[tuple[object, int | None, str | None]]) -> None:
    """Record one action for many subjects: (subject_id, generation, detail) each."""
    rows = [(tx.id, now, subject, str(i), action, generation, detail)
            for i, generation, detail in entries]
    if rows:
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        tx.write(f"{_INSERT} VALUES {values}", [v for row in rows for v in row])


def event_story(box: Box, event_id: int) -> list[Entry]:
    """An event's story: its ``stored`` line, then what its history rows say."""
    rows = box.read(
        """SELECT created_at, 'stored', NULL::bigint, NULL::text, 0::bigint AS n
           FROM events WHERE inbox_id = %(box)s AND id = %(id)s
           UNION ALL
           SELECT at, action, generation, detail, id FROM history
           WHERE inbox_id = %(box)s AND subject = 'event' AND subject_id = %(key)s
           ORDER BY n""", {"box": box.id, "id": event_id, "key": str(event_id)}).fetchall()
    return [Entry(at, "event", str(event_id), action, generation, detail)
            for at, action, generation, detail, _ in rows]
