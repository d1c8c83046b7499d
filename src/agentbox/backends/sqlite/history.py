"""The append-only story of every event, message and dispatch.

Each writer records its transitions here inside its own transaction, so the
story can never disagree with the state it describes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from agentbox.rules.records import Entry

_INSERT = """INSERT INTO history (at, subject, subject_id, action, generation, detail)
             VALUES (?, ?, ?, ?, ?, ?)"""


def record(conn: sqlite3.Connection, now: int, subject: str, subject_id: object, action: str,
           generation: int | None = None, detail: str | None = None) -> None:
    conn.execute(_INSERT, (now, subject, str(subject_id), action, generation, detail))


def record_many(conn: sqlite3.Connection, now: int, subject: str, action: str,
                entries: Iterable[tuple[object, int | None, str | None]]) -> None:
    """Record one action for many subjects: (subject_id, generation, detail) each."""
    conn.executemany(_INSERT, ((now, subject, str(i), action, generation, detail)
                               for i, generation, detail in entries))


def story(conn: sqlite3.Connection, subject: str, subject_id: object) -> list[Entry]:
    rows = conn.execute(
        """SELECT at, subject, subject_id, action, generation, detail FROM history
           WHERE subject = ? AND subject_id = ? ORDER BY id""",
        (subject, str(subject_id))).fetchall()
    return [Entry(*row) for row in rows]
