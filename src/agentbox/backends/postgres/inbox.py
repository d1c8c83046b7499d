"""The events of one inbox: ingest once, look up, replay.

Ingest takes no inbox lock: a UNIQUE (inbox_id, source, source_id) key
refuses the second copy, one statement stores and counts the event, and a
second reads back the standing copy when the key was taken, so two hosts
ingesting the same delivery at once get one ``stored`` and one ``duplicate``. What a run
does to events (claim, finish, fail) is in :mod:`.runs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres import history
from agentbox.backends.postgres.db import Box, Tx, transaction
from agentbox.backends.postgres.lease import locked
from agentbox.backends.postgres.schema import INGEST_SLOT
from agentbox.errors import Busy
from agentbox.rules.keys import check_key, conflict_detail, prefix_bound
from agentbox.rules.records import Event, IngestOutcome, IngestResult

_RACE_RETRIES = 3

COLUMNS = ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
           "error, created_at, updated_at")

# New events are pending: the statement that stores them adds them to a slot
# of the tally (see schema.INGEST_SLOT). It wakes the inbox's watchers only when
# no other event was waiting to be claimed: a watcher sleeps only when there is
# none, and a notifying transaction commits in turn with every other notifying
# one on the server, so a busy inbox's ingests must not all notify (measured:
# four processes ingesting at once lost half their rate).
_COUNT = f"""
counted AS (
    INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
    SELECT %(box)s, 'events', 'pending', {INGEST_SLOT}, COUNT(*) FROM stored
    HAVING COUNT(*) > 0
    ON CONFLICT (inbox_id, tbl, state, slot) DO UPDATE SET n = state_counts.n + excluded.n),
woken AS (
    SELECT pg_notify(current_schema(), %(box)s::text) FROM (SELECT FROM stored LIMIT 1) s
    WHERE NOT EXISTS (SELECT FROM events WHERE inbox_id = %(box)s AND status = 'pending'
                      AND available_at <= %(now)s))"""

# A key still remembered after its event was pruned is not stored again.
_NOT_REMEMBERED = """NOT EXISTS (
    SELECT FROM pruned_keys p WHERE p.inbox_id = %(box)s AND p.source = {source}
    AND p.source_id = {source_id} AND p.until > %(now)s)"""

# One event, stored and counted: its id, or no row when the key is taken (a
# duplicate draws an id from the sequence: ids are unique, not consecutive).
STORE = f"""
WITH stored AS (
    INSERT INTO events (inbox_id, source, source_id, payload, created_at, updated_at)
    SELECT %(box)s, %(source)s, %(source_id)s, %(payload)s, %(now)s, %(now)s
    WHERE {_NOT_REMEMBERED.format(source="%(source)s", source_id="%(source_id)s")}
    ON CONFLICT (inbox_id, source, source_id) DO NOTHING
    RETURNING id),
{_COUNT}
SELECT id FROM stored, (SELECT count(*) FROM woken) w"""

# A batch of events, stored and counted: (id, source, source_id) of each row
# stored. Only the first line of a key, and only a key not stored yet, reaches
# the INSERT, so the events a batch stores get consecutive ids, as on SQLite
# (unless another session stores one of its keys meanwhile: ON CONFLICT
# settles that). Checking first costs a single event a third of its speed.
_STORE_BATCH = f"""
WITH items AS (
    SELECT * FROM unnest(%(sources)s::text[], %(ids)s::text[], %(payloads)s::text[])
    WITH ORDINALITY AS i (source, source_id, payload, n)),
fresh AS (
    SELECT DISTINCT ON (source, source_id) * FROM items i
    WHERE NOT EXISTS (SELECT FROM events e WHERE e.inbox_id = %(box)s
                      AND e.source = i.source AND e.source_id = i.source_id)
      AND {_NOT_REMEMBERED.format(source="i.source", source_id="i.source_id")}
    ORDER BY source, source_id, n),
stored AS (
    INSERT INTO events (inbox_id, source, source_id, payload, created_at, updated_at)
    SELECT %(box)s, source, source_id, payload, %(now)s, %(now)s FROM fresh ORDER BY n
    ON CONFLICT (inbox_id, source, source_id) DO NOTHING
    RETURNING id, source, source_id),
{_COUNT}
SELECT id, source, source_id FROM stored, (SELECT count(*) FROM woken) w"""

# The copy standing under a key: (id, same payload?). A statement of its own, so
# that it sees a copy another session committed while the INSERT waited for it.
_STANDING = """SELECT id, payload = %(payload)s FROM events
               WHERE inbox_id = %(box)s AND source = %(source)s AND source_id = %(source_id)s"""


def _remembered(box: Box, source: str, source_id: str, payload: str,
                now: int) -> IngestResult | None:
    """A key whose event was pruned inside the dedupe window, compared by digest;
    None when the key is not remembered (it was pruned meanwhile: store it anew).

    A conflict is not written into the pruned event's history (it has none
    left); the caller is told all the same.
    """
    from agentbox.rules.retention import digest

    row = box.read("""SELECT event_id, digest FROM pruned_keys
                      WHERE inbox_id = %s AND source = %s AND source_id = %s AND until > %s""",
                   (box.id, source, source_id, now)).fetchone()
    if row is None:
        return None
    outcome: IngestOutcome = "duplicate" if digest(payload) == bytes(row[1]) else "conflict"
    return IngestResult(outcome, int(row[0]), source, source_id)


def store_in(box: Box, source: str, source_id: str, payload: str, now: int,
             record_conflict: bool = True) -> IngestResult:
    """Store an event: its own statement, or part of the caller's transaction.

    A new key costs one statement; a taken one a second, to read the standing
    copy. A conflict is recorded in that event's story.
    """
    args = {"box": box.id, "source": source, "source_id": source_id, "payload": payload,
            "now": now}
    for _ in range(_RACE_RETRIES):
        stored = box.read(STORE, args).fetchone()
        if stored is not None:
            return IngestResult("stored", int(stored[0]), source, source_id)
        standing = box.read(_STANDING, args).fetchone()
        if standing is not None:
            break
        remembered = _remembered(box, source, source_id, payload, now)
        if remembered is not None:
            return remembered
        # else it was pruned, and forgotten, since: store ours
    else:
        raise Busy(f"event {source}/{source_id} kept changing under concurrent writers")
    event_id, same = int(standing[0]), bool(standing[1])
    if same:
        return IngestResult("duplicate", event_id, source, source_id)
    if record_conflict:
        _record_conflicts(box, now, [(event_id, payload)])
    return IngestResult("conflict", event_id, source, source_id)


def _record_conflicts(box: Box, now: int, conflicts: list[tuple[int, str]]) -> None:
    """The refusals in the stories of the events that stand; a statement of its own
    unless the caller is in a transaction."""
    entries = [(event_id, None, conflict_detail(payload)) for event_id, payload in conflicts]
    if isinstance(box, Tx):
        history.record_many(box, now, "event", "conflict", entries)
        return
    with transaction(box.conn, box.id) as tx:
        history.record_many(tx, now, "event", "conflict", entries)


def ingest(conn: Connection[Any], box_id: int, source: str, source_id: str, payload: str,
           now: int) -> IngestResult:
    """Store one event whose payload is already canonical JSON: one round trip."""
    check_key(source, source_id)
    return store_in(Box(conn, box_id), source, source_id, payload, now)


def ingest_many(conn: Connection[Any], box_id: int, items: Iterable[tuple[str, str, str]],
                now: int) -> list[IngestResult]:
    """Store many events in one transaction, in order; the caller sizes the batch.

    One statement stores (and counts) every new key; a second reads back the
    standing copy of every other line's key, so a key repeated inside the
    batch is a duplicate or conflict of its first line, as it would be line by
    line.
    """
    batch = list(items)
    for source, source_id, _ in batch:
        check_key(source, source_id)
    if not batch:
        return []
    with transaction(conn, box_id) as tx:
        return _store_batch(tx, batch, now)


def _store_batch(tx: Tx, batch: list[tuple[str, str, str]], now: int) -> list[IngestResult]:
    stored = {(str(s), str(i)): int(event_id) for event_id, s, i in tx.read(
        _STORE_BATCH, {"sources": [s for s, _, _ in batch], "ids": [i for _, i, _ in batch],
         "payloads": [p for _, _, p in batch], "box": tx.id, "now": now}).fetchall()}
    first = {key: n for n, key in reversed(list(enumerate((s, i) for s, i, _ in batch)))
             if key in stored}  # the line of the batch that stored each key
    taken = [(n, item) for n, item in enumerate(batch) if first.get(item[:2]) != n]
    standing = {int(n): (int(event_id), bool(same)) for n, event_id, same in tx.read(
        """SELECT i.n, e.id, e.payload = i.payload
           FROM unnest(%(ns)s::int[], %(sources)s::text[], %(ids)s::text[],
                       %(payloads)s::text[]) AS i (n, source, source_id, payload)
           JOIN events e ON e.inbox_id = %(box)s AND e.source = i.source
                        AND e.source_id = i.source_id""",
        {"ns": [n for n, _ in taken], "sources": [s for _, (s, _, _) in taken],
         "ids": [i for _, (_, i, _) in taken], "payloads": [p for _, (_, _, p) in taken],
         "box": tx.id}).fetchall()} if taken else {}
    results: list[IngestResult] = []
    conflicts: list[tuple[int, str]] = []
    for n, (source, source_id, payload) in enumerate(batch):
        if first.get((source, source_id)) == n:
            results.append(IngestResult("stored", stored[source, source_id], source,
                                        source_id))
        elif n not in standing:  # remembered after a prune, or pruned since: one by one
            results.append(store_in(tx, source, source_id, payload, now))
        else:
            event_id, same = standing[n]
            results.append(IngestResult("duplicate" if same else "conflict", event_id,
                                        source, source_id))
            if not same:
                conflicts.append((event_id, payload))
    if conflicts:
        _record_conflicts(tx, now, conflicts)
    return results


def events_where(box: Box, where: str, params: Sequence[object] = ()) -> list[Event]:
    rows = box.read(f"SELECT {COLUMNS} FROM events WHERE inbox_id = %s AND {where}",
                    (box.id, *params)).fetchall()
    return [Event(*row) for row in rows]


def get(box: Box, event_id: int) -> Event | None:
    found = events_where(box, "id = %s", (event_id,))
    return found[0] if found else None


def find(box: Box, source: str, source_id: str) -> Event | None:
    found = events_where(box, "source = %s AND source_id = %s", (source, source_id))
    return found[0] if found else None


def with_key_prefix(box: Box, source: str, prefix: str) -> list[Event]:
    """Events of ``source`` whose source_id starts with ``prefix``, oldest first.

    A range on the (inbox_id, source, source_id) key, whose columns compare in
    code point order (``COLLATE "C"``), so it reads only the matching rows.
    """
    return events_where(box, "source = %s AND source_id >= %s AND source_id < %s ORDER BY id",
                        (source, prefix, prefix_bound(prefix)))


def listing(box: Box, states: Sequence[str], source: str | None, since: int | None,
            until: int | None, before: int | None, limit: int) -> list[Event]:
    """The newest ``limit`` events that match, oldest first.

    One walk per state asked for down the (inbox_id, status, id) index from
    the newest (with none asked for, one down the (inbox_id, id) key), each
    stopping at ``limit`` matches, merged in one query: a short state is
    found at once, and other inboxes' rows are never read.
    """
    where = "inbox_id = %(box)s"
    params: dict[str, object] = {"box": box.id, "limit": limit}
    for clause, name, value in (("source = %(source)s", "source", source),
                                ("created_at >= %(since)s", "since", since),
                                ("created_at < %(until)s", "until", until),
                                ("id < %(before)s", "before", before)):
        if value is not None:
            where += f" AND {clause}"
            params[name] = value
    walks = []
    for n, state in enumerate(dict.fromkeys(states) or (None,)):
        params[f"s{n}"] = state
        walks.append(f"(SELECT {COLUMNS} FROM events WHERE {where}"
                     f"{'' if state is None else f' AND status = %(s{n})s'} "
                     "ORDER BY id DESC LIMIT %(limit)s)")
    rows = box.read(f"SELECT * FROM ({' UNION ALL '.join(walks)}) newest "
                    "ORDER BY id DESC LIMIT %(limit)s", params).fetchall()
    return [Event(*row) for row in reversed(rows)]


def dead(box: Box, limit: int | None = None) -> list[Event]:
    return events_where(box, "status = 'dead' ORDER BY id LIMIT %s", (limit,))


def replay(conn: Connection[Any], box_id: int, ids: Sequence[int] | None,
           now: int) -> list[int]:
    """Dead events back to pending with attempts reset; same key, no new row.

    ``ids=None`` replays every dead event. Returns the ids replayed; ids that
    are not dead are left alone (the caller reports them).
    """
    with locked(conn, box_id) as (tx, _):
        chosen = "" if ids is None else "AND id = ANY(%s)"
        params: list[object] = [now, box_id] + ([] if ids is None else [list(ids)])
        replayed = sorted(int(r[0]) for r in tx.read(
            f"""UPDATE events SET status = 'pending', attempts = 0, available_at = 0,
                    claim_gen = NULL, error = NULL, updated_at = %s
                WHERE inbox_id = %s AND status = 'dead' {chosen} RETURNING id""",
            params).fetchall())
        history.record_many(tx, now, "event", "replayed", ((i, None, None) for i in replayed))
        return replayed
