"""The append-only story of every event, message, dispatch, timer and approval.

Each writer records its transitions here inside its own transaction, so the
story can never disagree with the state it describes. An event's first line,
``stored``, is its row itself (``created_at``): the event and that line are
one write, and a million events cost a million fewer history rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agentbox.rules.records import Entry

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader, Tx

_INSERT = """INSERT INTO history (inbox_id, at, subject, subject_id, action, generation, detail)
             VALUES (:box, :at, :subject, :subject_id, :action, :generation, :detail)"""


def record(tx: Tx, now: int, subject: str, subject_id: object, action: str,
           generation: int | None = None, detail: str | None = None) -> None:
    tx.run(_INSERT, at=now, subject=subject, subject_id=str(subject_id), action=action,
           generation=generation, detail=detail)


def record_many(tx: Tx, now: int, subject: str, action: str,
                entries: Iterable[tuple[object, int | None, str | None]]) -> None:
    """Record one action for many subjects: (subject_id, generation, detail) each."""
    rows = [{"at": now, "subject": subject, "subject_id": str(i), "action": action,
             "generation": generation, "detail": detail} for i, generation, detail in entries]
    if rows:
        tx.many(_INSERT, rows)


def event_story(reader: Reader, event_id: int) -> list[Entry]:
    """An event's story: its ``stored`` line, then what its history rows say."""
    rows = reader.rows(
        """SELECT created_at, 'stored', NULL, NULL, 0 AS n FROM events
           WHERE inbox_id = :box AND id = :id
           UNION ALL
           SELECT at, action, generation, detail, id FROM history
           WHERE inbox_id = :box AND subject = 'event' AND subject_id = :key
           ORDER BY n""", id=event_id, key=str(event_id))
    return [Entry(int(at), "event", str(event_id), str(action),
                  None if generation is None else int(generation), detail)
            for at, action, generation, detail, _ in rows]


def story(reader: Reader, subject: str, subject_id: object) -> list[Entry]:
    """The story of any other subject (a message, a dispatch, a timer, an approval)."""
    rows = reader.rows(
        """SELECT at, action, generation, detail FROM history
           WHERE inbox_id = :box AND subject = :subject AND subject_id = :key ORDER BY id""",
        subject=subject, key=str(subject_id))
    return [Entry(int(at), subject, str(subject_id), str(action),
                  None if generation is None else int(generation), detail)
            for at, action, generation, detail in rows]
