"""The events of one box: ingest once, look up, replay.

Ingest takes no box lock: a UNIQUE (inbox_id, source, source_id) key
refuses the second copy, and one statement stores the event, counts it and
reads back the standing copy when there was one, so two hosts ingesting the
same delivery at once get one ``stored`` and one ``duplicate``. What a run
does to events (claim, finish, fail) is in :mod:`.runs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import Connection, Cursor

from agentbox.backends import INGEST_CHUNK, checked_chunks
from agentbox.backends.postgres import history
from agentbox.backends.postgres.db import write
from agentbox.backends.postgres.lease import locked
from agentbox.backends.postgres.schema import INGEST_SLOT
from agentbox.errors import Busy
from agentbox.rules.keys import check_key, conflict_detail, prefix_bound
from agentbox.rules.records import Event, IngestResult

_RACE_RETRIES = 3

COLUMNS = ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
           "error, created_at, updated_at")

# Stores the event and counts it, or (when the key is taken) reads back the
# standing copy: (id, stored?, same payload?). The read-back sees only what
# was committed when the statement began, so a copy committed by another
# session while this INSERT waited for it comes back as no row at all.
_STORE = f"""
WITH stored AS (
    INSERT INTO events (inbox_id, source, source_id, payload, created_at, updated_at)
    VALUES (%(inbox)s, %(source)s, %(source_id)s, %(payload)s, %(now)s, %(now)s)
    ON CONFLICT (inbox_id, source, source_id) DO NOTHING
    RETURNING id),
counted AS (
    INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
    SELECT %(inbox)s, 'events', 'pending', {INGEST_SLOT}, 1 FROM stored
    ON CONFLICT (inbox_id, tbl, state, slot) DO UPDATE SET n = state_counts.n + 1)
SELECT id, true, true FROM stored
UNION ALL
SELECT id, false, payload = %(payload)s FROM events
WHERE inbox_id = %(inbox)s AND source = %(source)s AND source_id = %(source_id)s
  AND NOT EXISTS (SELECT FROM stored)"""

_STANDING = """SELECT id, false, payload = %(payload)s FROM events
               WHERE inbox_id = %(inbox)s AND source = %(source)s AND source_id = %(source_id)s"""


def _send(conn: Connection[Any], box: int, source: str, source_id: str, payload: str,
          now: int) -> Cursor[Any]:
    return conn.execute(_STORE, {"inbox": box, "source": source, "source_id": source_id,
                                 "payload": payload, "now": now})


def _result(conn: Connection[Any], box: int, sent: Cursor[Any], source: str,
            source_id: str, payload: str, now: int, record_conflict: bool) -> IngestResult:
    """Read what :func:`_send` found; record a conflict in the event's story."""
    args = {"inbox": box, "source": source, "source_id": source_id, "payload": payload,
            "now": now}
    row = sent.fetchone()
    for _ in range(_RACE_RETRIES):
        if row is not None:
            break
        # Another session stored this key while we waited: read its copy (or,
        # if it is gone again, store ours).
        row = conn.execute(_STANDING, args).fetchone() or conn.execute(_STORE, args).fetchone()
    if row is None:
        raise Busy(f"event {source}/{source_id} kept changing under concurrent writers")
    event_id, stored, same = int(row[0]), bool(row[1]), bool(row[2])
    if stored:
        return IngestResult("stored", event_id, source, source_id)
    if same:
        return IngestResult("duplicate", event_id, source, source_id)
    if record_conflict:
        history.record(conn, box, now, "event", event_id, "conflict",
                       detail=conflict_detail(payload))
    return IngestResult("conflict", event_id, source, source_id)


def store_in(conn: Connection[Any], box: int, source: str, source_id: str, payload: str,
             now: int, record_conflict: bool = True) -> IngestResult:
    """Store an event inside the caller's transaction (or as its own statement)."""
    sent = _send(conn, box, source, source_id, payload, now)
    return _result(conn, box, sent, source, source_id, payload, now, record_conflict)


def ingest(conn: Connection[Any], box: int, source: str, source_id: str, payload: str,
           now: int) -> IngestResult:
    """Store one event whose payload is already canonical JSON, in one round trip."""
    check_key(source, source_id)
    return store_in(conn, box, source, source_id, payload, now)


def ingest_many(conn: Connection[Any], box: int, items: Iterable[tuple[str, str, str]],
                now: int, chunk: int = INGEST_CHUNK) -> list[IngestResult]:
    """Store many events, ``chunk`` per transaction, in order.

    A chunk's statements go out together; their answers are read afterwards.
    """
    results: list[IngestResult] = []
    for batch in checked_chunks(items, chunk):
        with write(conn):
            sent = [_send(conn, box, s, i, p, now) for s, i, p in batch]
            results.extend(_result(conn, box, c, s, i, p, now, True)
                           for c, (s, i, p) in zip(sent, batch, strict=True))
    return results


def events_where(conn: Connection[Any], box: int, where: str,
                 params: Sequence[object] = ()) -> list[Event]:
    rows = conn.execute(f"SELECT {COLUMNS} FROM events WHERE inbox_id = %s AND {where}",
                        (box, *params)).fetchall()
    return [Event(*row) for row in rows]


def get(conn: Connection[Any], box: int, event_id: int) -> Event | None:
    found = events_where(conn, box, "id = %s", (event_id,))
    return found[0] if found else None


def find(conn: Connection[Any], box: int, source: str, source_id: str) -> Event | None:
    found = events_where(conn, box, "source = %s AND source_id = %s", (source, source_id))
    return found[0] if found else None


def with_key_prefix(conn: Connection[Any], box: int, source: str,
                    prefix: str) -> list[Event]:
    """Events of ``source`` whose source_id starts with ``prefix``, oldest first.

    A range on the (inbox_id, source, source_id) key, whose columns compare in
    code point order (``COLLATE "C"``), so it reads only the matching rows.
    """
    return events_where(conn, box,
                        "source = %s AND source_id >= %s AND source_id < %s ORDER BY id",
                        (source, prefix, prefix_bound(prefix)))


def dead(conn: Connection[Any], box: int, limit: int | None = None) -> list[Event]:
    return events_where(conn, box, "status = 'dead' ORDER BY id LIMIT %s", (limit,))


def replay(conn: Connection[Any], box: int, ids: Sequence[int] | None,
           now: int) -> list[int]:
    """Dead events back to pending with attempts reset; same key, no new row.

    ``ids=None`` replays every dead event. Returns the ids replayed; ids that
    are not dead are left alone (the caller reports them).
    """
    with locked(conn, box):
        chosen = "" if ids is None else "AND id = ANY(%s)"
        params: list[object] = [now, box] + ([] if ids is None else [list(ids)])
        replayed = sorted(int(r[0]) for r in conn.execute(
            f"""UPDATE events SET status = 'pending', attempts = 0, available_at = 0,
                    claim_gen = NULL, error = NULL, updated_at = %s
                WHERE inbox_id = %s AND status = 'dead' {chosen} RETURNING id""",
            params).fetchall())
        history.record_many(conn, box, now, "event", "replayed",
                            ((i, None, None) for i in replayed))
        return replayed
