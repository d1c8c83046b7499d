"""The events of one inbox: ingest once, look up, list, replay.

An event is keyed ``(source, source_id)``. The engine's one statement stores
a new key (counted, and announced to watchers) without taking the inbox's
lock; a key already taken is judged here, by reads: the same canonical
payload is a ``duplicate``, another one a ``conflict`` (written into the
story of the event that stands), and a key whose event was pruned inside the
dedupe window is judged by the digest remembered for it. A key found neither
stored nor remembered was pruned and forgotten in between: it is stored anew.

Every rule a delivery must pass (the key's bounds, the sources agentbox
writes itself, strict canonical JSON within the size bound) is applied here,
so the CLI, ``serve``, ``--jsonl`` and a program calling :meth:`Inbox.ingest`
cannot differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentbox.errors import Busy
from agentbox.jsonutil import DEFAULT_MAX_PAYLOAD, payload_text
from agentbox.ledger import history
from agentbox.ledger.core import Core, among
from agentbox.rules.keys import check_delivery_key, check_key, conflict_detail, prefix_bound
from agentbox.rules.records import Entry, Event, IngestOutcome, IngestResult

if TYPE_CHECKING:
    from agentbox.ledger.engine import Engine, Key, Reader, Standing, Tx

COLUMNS = ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
           "error, created_at, updated_at")
RACE_RETRIES = 3  # a key pruned and forgotten between two reads, again and again: Busy

Payload = str | Mapping[str, Any]


def event_of(row: Sequence[Any]) -> Event:
    return Event(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), int(row[5]),
                 None if row[6] is None else int(row[6]), int(row[7]), row[8], int(row[9]),
                 int(row[10]))


def events_where(reader: Reader, where: str, **params: Any) -> list[Event]:
    return [event_of(row) for row in reader.rows(
        f"SELECT {COLUMNS} FROM events WHERE inbox_id = :box AND {where}", **params)]


def with_key_prefix(reader: Reader, source: str, prefix: str) -> list[Event]:
    """Events of ``source`` whose source_id starts with ``prefix``, oldest first: a range
    on the key's index (both engines compare keys in code point order)."""
    return events_where(reader, "source = :source AND source_id >= :low AND source_id < :high "
                        "ORDER BY id", source=source, low=prefix, high=prefix_bound(prefix))


def _spellings(payload: str) -> tuple[str, ...]:
    """How a stored event may spell this payload: canonically, or, stored by 0.2 and not
    rewritten yet, as 0.2 did (see :class:`agentbox.jsonutil.Canonical`)."""
    legacy = getattr(payload, "legacy", None)
    return (payload, legacy) if legacy else (payload,)


def _remembered(reader: Reader, source: str, source_id: str, payload: str,
                now: int) -> IngestResult | None:
    """A key whose event was pruned inside the dedupe window, judged by its digest;
    None when the key is not remembered.

    A conflict is not written into the pruned event's story (it has none left);
    the caller is told all the same.
    """
    from agentbox.rules.retention import digest

    row = reader.one("""SELECT event_id, digest FROM pruned_keys WHERE inbox_id = :box
                        AND source = :source AND source_id = :source_id AND until > :now""",
                     source=source, source_id=source_id, now=now)
    if row is None:
        return None
    # A key pruned before payloads were canonical per JCS is remembered by the digest
    # of the spelling they had then.
    same = bytes(row[1]) in {digest(spelling) for spelling in _spellings(payload)}
    outcome: IngestOutcome = "duplicate" if same else "conflict"
    return IngestResult(outcome, int(row[0]), source, source_id)


def _fits(text: str, max_payload: int) -> bool:
    """Whether a payload is within the size bound in force (a stored one may predate it)."""
    return len(text) <= max_payload // 4 or len(text.encode("utf-8")) <= max_payload


def _against(standing: Standing, source: str, source_id: str, payload: str) -> IngestResult:
    """The answer to a key whose event stands: a duplicate of the payload stored, in
    either spelling (one stored before JCS and not rewritten yet is still its
    duplicate), else a conflict."""
    event_id, kept = standing
    outcome: IngestOutcome = "duplicate" if kept in _spellings(payload) else "conflict"
    return IngestResult(outcome, event_id, source, source_id)


def _judged(reader: Reader, source: str, source_id: str, payload: str, now: int,
            standing: Standing | None) -> tuple[IngestResult, bool] | None:
    """A key found taken: (duplicate or conflict, whether its event stands to note a
    conflict in), or None when it is neither stored nor remembered. ``standing``: the
    event the storing statement read under the key, where it read one."""
    if standing is None:
        row = reader.one("""SELECT id, payload FROM events WHERE inbox_id = :box
                            AND source = :source AND source_id = :source_id""",
                         source=source, source_id=source_id)
        standing = None if row is None else (int(row[0]), str(row[1]))
    if standing is not None:
        return _against(standing, source, source_id, payload), True
    remembered = _remembered(reader, source, source_id, payload, now)
    return None if remembered is None else (remembered, False)


def note_conflicts(tx: Tx, now: int, conflicts: Iterable[tuple[int, str]]) -> None:
    """The refused payloads (as digests) in the stories of the events that stand."""
    history.record_many(tx, now, "event", "conflict",
                        ((event_id, None, conflict_detail(payload))
                         for event_id, payload in conflicts))


def store_in(engine: Engine, tx: Tx, source: str, source_id: str, payload: str, now: int,
             record_conflict: bool = True) -> IngestResult:
    """Store an event inside the caller's transaction (a timer's, an approval's outcome)."""
    for _ in range(RACE_RETRIES):
        new = engine.store_event(tx, tx.box, source, source_id, payload, now)
        if isinstance(new, int):
            return IngestResult("stored", new, source, source_id)
        judged = _judged(tx, source, source_id, payload, now, new)
        if judged is not None:
            result, stands = judged
            if result.outcome == "conflict" and stands and record_conflict:
                note_conflicts(tx, now, [(result.id, payload)])
            return result
    raise Busy(f"event {source}/{source_id} kept changing under concurrent writers")


# Keys looked up per read by _standing. SQLite finds a named parameter's name by a
# walk of its list, so binding n of them costs n²: a batch of 5,000 keys (10,000
# names) took 420 ms in one read, and 15 ms in slices of this size. It also keeps a
# caller's large batch under PostgreSQL's 65,535 parameters per statement.
STANDING_SLICE = 250


def _standing(tx: Tx, keys: Sequence[Key]) -> dict[Key, Standing]:
    """(id, payload) of the events stored under ``keys``, a read per slice of them."""
    found: dict[Key, Standing] = {}
    for start in range(0, len(keys), STANDING_SLICE):
        part = keys[start:start + STANDING_SLICE]
        values = ", ".join(f"(:s{n}, :i{n})" for n in range(len(part)))
        params = {f"{kind}{n}": value for n, key in enumerate(part)
                  for kind, value in zip("si", key, strict=True)}
        rows = tx.rows(f"""WITH k (source, source_id) AS (VALUES {values})
                           SELECT e.source, e.source_id, e.id, e.payload FROM k
                           JOIN events e ON e.inbox_id = :box AND e.source = k.source
                                        AND e.source_id = k.source_id""", **params)
        found.update(((str(s), str(i)), (int(n), str(p))) for s, i, n, p in rows)
    return found


class Inbox(Core):
    """Events: stored once per key, looked up, listed and replayed."""

    def ingest(self, source: str, source_id: str, payload: Payload, now: int, *,
               max_payload: int = DEFAULT_MAX_PAYLOAD) -> IngestResult:
        """Store one delivered event, once per (source, source_id).

        ``payload`` is a JSON object, as text in any spelling or as a mapping;
        what is stored and compared is its canonical form. The same key again
        with the same payload is ``duplicate``; with another payload
        ``conflict`` (the first stands, the refusal is in its story). Bad input
        (a malformed or reserved key, a payload that is not a strict JSON
        object within ``max_payload`` bytes) raises BadInput and stores nothing.
        """
        check_delivery_key(source, source_id)
        stored = self._glance(source, source_id)
        if stored is not None:
            event_id, kept = stored
            # The very text stored (canonical, checked when it was stored) is the same
            # payload: a redelivery answered with no parse, by a read alone.
            if isinstance(payload, str) and payload == kept and _fits(kept, max_payload):
                return IngestResult("duplicate", event_id, source, source_id)
        text = payload_text(payload, max_payload)
        if stored is not None:
            return self._noted(_against(stored, source, source_id, text), text, now)
        box = self.inbox_id
        for _ in range(RACE_RETRIES):
            new = self.engine.store_event(None, box, source, source_id, text, now)
            if isinstance(new, int):
                return IngestResult("stored", new, source, source_id)
            judged = _judged(self._read(), source, source_id, text, now, new)
            if judged is not None:
                result, stands = judged
                return self._noted(result, text, now) if stands else result
        raise Busy(f"event {source}/{source_id} kept changing under concurrent writers")

    def _glance(self, source: str, source_id: str) -> Standing | None:
        """(id, payload) of the event stored under the key, looked up without the write
        lock where the engine reads for free (see :meth:`Engine.glance`); None when
        there is none, or the engine has no such read, or the read was kept out: the
        write path then stores the key or judges it."""
        glance = self.engine.glance(self._read().box)  # of no inbox while none is made
        if glance is None:
            return None
        try:
            row = glance.one("""SELECT id, payload FROM events WHERE inbox_id = :box
                                AND source = :source AND source_id = :source_id""",
                             source=source, source_id=source_id)
        except Busy:
            return None
        return None if row is None else (int(row[0]), str(row[1]))

    def _noted(self, result: IngestResult, payload: str, now: int) -> IngestResult:
        """A judged key whose event stands: a conflict goes into that event's story."""
        if result.outcome == "conflict":
            with self._write() as tx:
                note_conflicts(tx, now, [(result.id, payload)])
        return result

    def ingest_many(self, items: Iterable[tuple[str, str, Payload]], now: int, *,
                    max_payload: int = DEFAULT_MAX_PAYLOAD) -> list[IngestResult]:
        """Store many (source, source_id, payload) deliveries, in order, in one transaction.

        All or nothing, and every item is checked before anything is stored.
        A key repeated inside the batch is a duplicate or conflict of its first
        line, as it would be line by line. The caller sizes the batch (``agentbox
        ingest --jsonl`` sends a few thousand at a time), which bounds how long
        it holds other writers up.
        """
        batch = []
        for source, source_id, payload in items:
            check_delivery_key(source, source_id)
            batch.append((source, source_id, payload_text(payload, max_payload)))
        if not batch:
            return []
        with self._write() as tx:
            stored = self.engine.store_events(tx, batch, now)
            if len(stored) == len(batch):  # every key new, none twice: all stored, in order
                return [IngestResult("stored", stored[source, source_id], source, source_id)
                        for source, source_id, _ in batch]
            first: dict[Key, int] = {}
            for n, (source, source_id, _) in enumerate(batch):
                if (source, source_id) in stored:
                    first.setdefault((source, source_id), n)
            standing = _standing(tx, list(dict.fromkeys(
                item[:2] for n, item in enumerate(batch) if first.get(item[:2]) != n)))
            results: list[IngestResult] = []
            conflicts: list[tuple[int, str]] = []
            for n, (source, source_id, payload) in enumerate(batch):
                key = (source, source_id)
                if first.get(key) == n:
                    results.append(IngestResult("stored", stored[key], source, source_id))
                elif key in standing:
                    result = _against(standing[key], source, source_id, payload)
                    if result.outcome == "conflict":
                        conflicts.append((result.id, payload))
                    results.append(result)
                else:  # remembered after a prune, or pruned and forgotten since: one by one
                    results.append(store_in(self.engine, tx, source, source_id, payload, now))
            note_conflicts(tx, now, conflicts)
            return results

    def event(self, event_id: int) -> Event | None:
        """One event by id, in any state."""
        found = events_where(self._read(), "id = :id", id=event_id)
        return found[0] if found else None

    def find(self, source: str, source_id: str) -> Event | None:
        """The event stored under a key, if any."""
        check_key(source, source_id)
        found = events_where(self._read(), "source = :source AND source_id = :source_id",
                             source=source, source_id=source_id)
        return found[0] if found else None

    def story(self, event_id: int) -> list[Entry]:
        """An event's history, oldest first: stored, claimed, failed, dead, replayed, …"""
        return history.event_story(self._read(), event_id)

    def history(self, subject: str, subject_id: object) -> list[Entry]:
        """The story of any other subject, oldest first: a message (by id), a dispatch
        (by key), a timer (by name) or an approval (by id)."""
        return history.story(self._read(), subject, subject_id)

    def dead(self, limit: int | None = None) -> list[Event]:
        """Dead events, oldest first (the oldest ``limit`` of them)."""
        bound = "" if limit is None else " LIMIT :limit"
        return events_where(self._read(), f"status = 'dead' ORDER BY id{bound}", limit=limit)

    def events(self, states: Sequence[str] = (), source: str | None = None,
               since: int | None = None, until: int | None = None, before: int | None = None,
               limit: int = 100) -> list[Event]:
        """The newest ``limit`` events that match every filter given, oldest first.

        ``states``: any of them (none given: every state); ``since``/``until``:
        arrival (``created_at``) at or after / before; ``before``: ids below it,
        so a caller pages back through the inbox by id. One walk per state down
        the (status, id) index from the newest, each stopping at ``limit``
        matches, merged in one query: a short state is found at once on any size
        of inbox. The source is compared as an expression (``source || ''``), so
        neither engine walks the key's index instead, whose rows would all have
        to be sorted.
        """
        where = "inbox_id = :box"
        params: dict[str, Any] = {"limit": limit}
        for clause, name, value in (("(source || '') = :source", "source", source),
                                    ("created_at >= :since", "since", since),
                                    ("created_at < :until", "until", until),
                                    ("id < :before", "before", before)):
            if value is not None:
                where += f" AND {clause}"
                params[name] = value
        walks = []
        for n, state in enumerate(dict.fromkeys(states) or (None,)):
            params[f"state{n}"] = state
            chosen = "" if state is None else f" AND status = :state{n}"
            walks.append(f"SELECT * FROM (SELECT {COLUMNS} FROM events WHERE {where}{chosen} "
                         f"ORDER BY id DESC LIMIT :limit) AS walk{n}")
        rows = self._read().rows(f"SELECT * FROM ({' UNION ALL '.join(walks)}) AS newest "
                                 "ORDER BY id DESC LIMIT :limit", **params)
        return [event_of(row) for row in reversed(rows)]

    def replay(self, ids: Sequence[int] | None, now: int) -> list[int]:
        """Dead events back to pending with attempts reset (all of them for ``None``);
        same key, no new row. Returns the ids replayed; ids that are not dead are
        left alone (the caller reports them)."""
        params: dict[str, Any] = {}
        only = ""  # every dead event
        if ids is not None:
            chosen, params = among(sorted(set(ids)))
            only = f"AND id IN {chosen}"
        with self._locked() as (tx, _):
            replayed = sorted(int(r[0]) for r in tx.rows(
                f"""UPDATE events SET status = 'pending', attempts = 0, available_at = 0,
                        claim_gen = NULL, error = NULL, updated_at = :now
                    WHERE inbox_id = :box AND status = 'dead' {only} RETURNING id""",
                now=now, **params))
            history.record_many(tx, now, "event", "replayed",
                                ((i, None, None) for i in replayed))
            return replayed
