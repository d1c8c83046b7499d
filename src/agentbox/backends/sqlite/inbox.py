"""The events table of one SQLite file: ingest once, look up, replay.

A UNIQUE (source, source_id) key refuses the second copy of a delivery; what
a run does to events (claim, finish, fail) is in :mod:`.runs`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from agentbox.backends.sqlite.db import take_write_lock, write
from agentbox.errors import DatabaseError
from agentbox.rules.keys import check_key, conflict_detail, prefix_bound
from agentbox.rules.records import Entry, Event, IngestOutcome, IngestResult

COLUMNS = ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
            "error, created_at, updated_at")


_INSERT = """INSERT INTO events (source, source_id, payload, created_at, updated_at)
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (source, source_id) DO NOTHING RETURNING id"""


def store_in(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
             now: int, record_conflict: bool = True) -> IngestResult:
    """Store an event inside the caller's write transaction."""
    row = conn.execute(_INSERT, (source, source_id, payload, now, now)).fetchone()
    if row is not None:  # the events_count_insert trigger has counted it
        return IngestResult("stored", row[0], source, source_id)
    found = conn.execute(
        "SELECT id, payload FROM events WHERE source = ? AND source_id = ?",
        (source, source_id)).fetchone()
    if found is None:  # the events_remembered trigger refused a pruned key
        return _remembered(conn, source, source_id, payload, now)
    event_id, stored = found
    return _against(conn, source, source_id, payload, event_id, stored, now, record_conflict)


def _against(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
             event_id: int, stored: str, now: int, record_conflict: bool = True) -> IngestResult:
    """A delivery whose key is taken: a duplicate of what is stored, or a conflict."""
    if stored == payload:
        return IngestResult("duplicate", event_id, source, source_id)
    if record_conflict:
        from agentbox.backends.sqlite import history  # rare: not on every ingest

        history.record(conn, now, "event", event_id, "conflict",
                       detail=conflict_detail(payload))
    return IngestResult("conflict", event_id, source, source_id)


def _remembered(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
                now: int) -> IngestResult:
    """A key whose event was pruned inside the dedupe window: compared by digest.

    A conflict is not written into the pruned event's history (it has none
    left); the caller is told all the same.
    """
    from agentbox.rules.retention import digest

    row = conn.execute(
        """SELECT event_id, digest FROM pruned_keys
           WHERE source = ? AND source_id = ? AND until > ?""",
        (source, source_id, now)).fetchone()
    if row is None:
        raise DatabaseError(f"event {source}/{source_id} was neither stored nor found")
    outcome: IngestOutcome = "duplicate" if digest(payload) == row[1] else "conflict"
    return IngestResult(outcome, int(row[0]), source, source_id)


def ingest(conn: sqlite3.Connection, source: str, source_id: str, payload: str,
           now: int) -> IngestResult:
    """Store one event whose payload is already canonical JSON (see jsonutil).

    A new key is stored by one autocommit statement (its count by trigger, in
    the same statement): no explicit transaction around a delivery that needs
    none. A key already taken is judged inside a write transaction.
    """
    check_key(source, source_id)
    stored = take_write_lock(conn, _INSERT, (source, source_id, payload, now, now))
    if stored:
        return IngestResult("stored", stored[0][0], source, source_id)
    with write(conn):
        return store_in(conn, source, source_id, payload, now)


def ingest_many(conn: sqlite3.Connection, items: Iterable[tuple[str, str, str]],
                now: int) -> list[IngestResult]:
    """Store many events in one transaction, in order; the caller sizes the batch.

    One INSERT ... SELECT over the batch (sent as a JSON array) stores every
    new key; the keys it did not store are read back in one query and judged
    one by one, in input order, so a key repeated inside the batch is a
    duplicate or conflict of its first line, as it would be line by line.
    """
    import json

    checked = list(items)
    for source, source_id, _ in checked:
        check_key(source, source_id)
    with write(conn):
        new = {(s, i): n for n, s, i in conn.execute(
            """INSERT INTO events (source, source_id, payload, created_at, updated_at)
               SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                      json_extract(value, '$[2]'), ?, ? FROM json_each(?)
               WHERE true ORDER BY key
               ON CONFLICT (source, source_id) DO NOTHING
               RETURNING id, source, source_id""", (now, now, json.dumps(checked))).fetchall()}
        taken = _existing(conn, [(s, i) for s, i, _ in checked if (s, i) not in new])
        results: list[IngestResult] = []
        for source, source_id, payload in checked:
            key = (source, source_id)
            if key in new:
                results.append(IngestResult("stored", new.pop(key), source, source_id))
                continue
            found = taken[key] if key in taken else _existing(conn, [key]).get(key)
            if found is None:  # refused by the events_remembered trigger: a pruned key
                results.append(_remembered(conn, source, source_id, payload, now))
                continue
            event_id, stored = found
            results.append(_against(conn, source, source_id, payload, event_id, stored, now))
        return results


def _existing(conn: sqlite3.Connection,
              keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, str]]:
    """(id, payload) of the events stored under ``keys``."""
    import json

    if not keys:
        return {}
    rows = conn.execute(
        """SELECT e.source, e.source_id, e.id, e.payload FROM json_each(?) AS k
           JOIN events AS e ON e.source = json_extract(k.value, '$[0]')
                            AND e.source_id = json_extract(k.value, '$[1]')""",
        (json.dumps(keys),)).fetchall()
    return {(s, i): (n, p) for s, i, n, p in rows}


def events_where(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> list[Event]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM events WHERE {where}", params).fetchall()
    return [Event(*row) for row in rows]


def story(conn: sqlite3.Connection, event_id: int) -> list[Entry]:
    """An event's history, opening with the "stored" entry its row itself records."""
    from agentbox.backends.sqlite import history
    from agentbox.rules.inbox import stored_entry

    row = conn.execute("SELECT created_at FROM events WHERE id = ?", (event_id,)).fetchone()
    opening = [] if row is None else [stored_entry(event_id, int(row[0]))]
    return opening + history.story(conn, "event", event_id)


def get(conn: sqlite3.Connection, event_id: int) -> Event | None:
    found = events_where(conn, "id = ?", (event_id,))
    return found[0] if found else None


def find(conn: sqlite3.Connection, source: str, source_id: str) -> Event | None:
    found = events_where(conn, "source = ? AND source_id = ?", (source, source_id))
    return found[0] if found else None


def with_key_prefix(conn: sqlite3.Connection, source: str, prefix: str) -> list[Event]:
    """Events of ``source`` whose source_id starts with ``prefix``, oldest first.

    A range on the (source, source_id) key, so it reads only the matching rows.
    """
    return events_where(conn, "source = ? AND source_id >= ? AND source_id < ? ORDER BY id",
                        (source, prefix, prefix_bound(prefix)))


def listing(conn: sqlite3.Connection, states: Sequence[str], source: str | None,
            since: int | None, until: int | None, before: int | None,
            limit: int) -> list[Event]:
    """The newest ``limit`` events that match, oldest first.

    Every query walks an index in id order from the newest down and stops at
    ``limit`` matches: one walk per state on (status, id), so a short state
    is found at once on any size of inbox. ``+source`` keeps SQLite off the
    (source, source_id) index, whose rows would all have to be sorted.
    """
    where: list[str] = ["1"]
    params: list[object] = []
    for clause, value in (("+source = ?", source), ("created_at >= ?", since),
                          ("created_at < ?", until), ("id < ?", before)):
        if value is not None:
            where.append(clause)
            params.append(value)
    rows: list[Event] = []
    for state in dict.fromkeys(states) or (None,):
        clause = "1" if state is None else "status = ?"
        rows += events_where(
            conn, f"{clause} AND {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
            [*([] if state is None else [state]), *params, limit])
    rows.sort(key=lambda e: e.id)
    return rows[-limit:]


def dead(conn: sqlite3.Connection, limit: int | None = None) -> list[Event]:
    return events_where(conn, "status = 'dead' ORDER BY id LIMIT ?",
                   (-1 if limit is None else limit,))


def replay(conn: sqlite3.Connection, ids: Sequence[int] | None, now: int) -> list[int]:
    """Dead events back to pending with attempts reset; same key, no new row.

    ``ids=None`` replays every dead event. Returns the ids replayed; ids that
    are not dead are left alone (the caller reports them).
    """
    with write(conn):
        if ids is None:
            where, params = "status = 'dead'", []
        else:
            where = f"status = 'dead' AND id IN ({','.join('?' * len(ids))})"
            params = list(ids)
        replayed = [r[0] for r in conn.execute(
            f"""UPDATE events SET status = 'pending', attempts = 0, available_at = 0,
                    claim_gen = NULL, error = NULL, updated_at = ?
                WHERE {where} RETURNING id""", [now, *params]).fetchall()]
        replayed.sort()
        from agentbox.backends.sqlite import history

        history.record_many(conn, now, "event", "replayed", ((i, None, None) for i in replayed))
        return replayed
