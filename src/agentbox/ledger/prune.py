"""Pruning an inbox in short transactions.

What may go is decided in :mod:`agentbox.rules.retention`. Each step is one
transaction over at most ``limit`` rows (plus their history), oldest first,
holding the inbox's lock so that no run or dispatch changes the rows it
removes; an ingest waits for one step at most, never for the whole prune.
Handing the freed space back to the disk is the engine's (:meth:`Engine.reclaim`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentbox.ledger.core import Core, among

if TYPE_CHECKING:
    from agentbox.ledger.engine import Tx
    from agentbox.rules.retention import Cutoffs, PruneCounts


@functools.cache
def _rows_of() -> dict[str, str]:
    """The rows each kind of prune would take, by kind; the same conditions count them
    for a dry run and select them for a step. Made at the first prune, not by every
    ingest that loads the store.

    Every row the rule names goes, the newest too: ids are numbered above the
    highest the inbox has handed out (see :func:`_raise_floors`), not above the
    highest left, so none is given out twice.
    """
    from agentbox.rules.records import SETTLED_DISPATCH_STATES
    from agentbox.rules.retention import KEPT_SOURCES

    kept = "(" + ", ".join(f"'{s}'" for s in KEPT_SOURCES) + ")"
    settled = "(" + ", ".join(f"'{s}'" for s in SETTLED_DISPATCH_STATES) + ")"
    return dict(
        done=f"""FROM events WHERE inbox_id = :box AND status = 'done'
                 AND updated_at < :done_before AND source NOT IN {kept}""",
        sent="""FROM outbox WHERE inbox_id = :box AND state = 'sent' AND sent_at < :sent_before""",
        dispatches=f"""FROM dispatches WHERE inbox_id = :box AND state IN {settled}
                       AND finished_at < :dispatch_before""",
        forgotten="FROM pruned_keys WHERE inbox_id = :box AND until <= :now",
        timer_history="""FROM history WHERE inbox_id = :box AND subject = 'timer'
                         AND at < :done_before""",
        steps="""FROM steps WHERE inbox_id = :box AND status IN ('done', 'failed')
                 AND finished_at < :done_before""",
        usage="FROM run_usage WHERE inbox_id = :box AND at < :usage_before")


FLOORS = {"events": "event_floor", "outbox": "message_floor"}


def _raise_floors(tx: Tx) -> None:
    """Record the highest event and message ids before rows may go, so that new rows
    are numbered above them (the engine's :meth:`Engine.new_id`)."""
    for table, floor in FLOORS.items():
        top = f"(SELECT MAX(id) FROM {table} WHERE inbox_id = :box)"
        tx.run(f"UPDATE inboxes SET {floor} = {top} WHERE id = :box AND {floor} < {top}")


def _forget_history(tx: Tx, subject: str, ids: Sequence[object]) -> None:
    if ids:
        chosen, params = among([str(i) for i in ids])
        tx.run(f"""DELETE FROM history WHERE inbox_id = :box AND subject = :subject
                   AND subject_id IN {chosen}""", subject=subject, **params)


def _events(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Done events, their history gone and their keys remembered for the window."""
    from agentbox.rules.retention import digest

    rows = tx.rows(f"SELECT id, source, source_id, payload, created_at {_rows_of()['done']} "
                   "ORDER BY id LIMIT :limit", limit=limit, **cut._asdict())
    remembered = [{"source": source, "source_id": source_id, "digest": digest(payload),
                   "event_id": event_id, "until": until}
                  for event_id, source, source_id, payload, created_at in rows
                  if (until := cut.remembered_until(int(created_at))) is not None]
    # A key is remembered once: one a prune remembered before (its event stored
    # again after the window) is replaced.
    tx.many("""DELETE FROM pruned_keys WHERE inbox_id = :box AND source = :source
               AND source_id = :source_id""", remembered)
    tx.many("""INSERT INTO pruned_keys (inbox_id, source, source_id, digest, event_id, until)
               VALUES (:box, :source, :source_id, :digest, :event_id, :until)""", remembered)
    ids = [int(row[0]) for row in rows]
    _forget_history(tx, "event", ids)
    if ids:
        chosen, params = among(ids)
        tx.run(f"DELETE FROM events WHERE inbox_id = :box AND id IN {chosen}", **params)
    return len(ids)


def _rows(tx: Tx, cut: Cutoffs, limit: int, kind: str, column: str, order: str,
          table: str, subject: str) -> int:
    """A prune of ``table``: the rows ``_rows_of()[kind]`` selects, their history gone
    with them."""
    found = [r[0] for r in tx.rows(
        f"SELECT {column} {_rows_of()[kind]} ORDER BY {order} LIMIT :limit",
        limit=limit, **cut._asdict())]
    _forget_history(tx, subject, found)
    if found:
        chosen, params = among(found)
        tx.run(f"DELETE FROM {table} WHERE inbox_id = :box AND {column} IN {chosen}", **params)
    return len(found)


def _sent(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Sent messages past ``keep_sent``."""
    return _rows(tx, cut, limit, "sent", "id", "id", "outbox", "message")


def _dispatches(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Settled dispatches past ``keep_sent``."""
    return _rows(tx, cut, limit, "dispatches", "key", "seq", "dispatches", "dispatch")


def _steps(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Finished steps past ``keep_done``: after that their KEY may run again."""
    return _rows(tx, cut, limit, "steps", "key", "finished_at", "steps", "step")


def _forgotten(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """Keys past the dedupe window: from now on they may be stored again."""
    return len(tx.rows(
        f"""DELETE FROM pruned_keys WHERE inbox_id = :box AND (source, source_id) IN
                (SELECT source, source_id {_rows_of()['forgotten']} ORDER BY until LIMIT :limit)
            RETURNING 1""", limit=limit, **cut._asdict()))


def _lines(tx: Tx, cut: Cutoffs, limit: int, kind: str, table: str) -> int:
    """A prune of lines nothing else refers to, oldest (lowest id) first."""
    return len(tx.rows(
        f"""DELETE FROM {table} WHERE inbox_id = :box
                AND id IN (SELECT id {_rows_of()[kind]} ORDER BY id LIMIT :limit)
            RETURNING 1""", limit=limit, **cut._asdict()))


def _timer_history(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """A timer's story keeps its last ``keep_done``: each occurrence adds a line."""
    return _lines(tx, cut, limit, "timer_history", "history")


def _usage(tx: Tx, cut: Cutoffs, limit: int) -> int:
    """What runs said they spent, once no budget can add it up any more, and the totals
    of the slots that ended by then (counted with nothing: they are the runs' sums)."""
    from agentbox.ledger.pause import USAGE_SLOT_S

    tx.run("""DELETE FROM usage_slots WHERE inbox_id = :box AND slot IN (
                  SELECT slot FROM usage_slots WHERE inbox_id = :box AND slot <= :last
                  ORDER BY slot LIMIT :limit)""",
           last=cut.usage_before - USAGE_SLOT_S, limit=limit)
    return _lines(tx, cut, limit, "usage", "run_usage")


_KINDS: tuple[Callable[[Tx, Cutoffs, int], int], ...] = (
    _events, _sent, _dispatches, _forgotten, _timer_history, _steps, _usage)


class Prune(Core):
    """Letting go of what retention lets go, a bounded step at a time."""

    def prunable(self, cut: Cutoffs) -> PruneCounts:
        """What :meth:`prune_step` calls would remove at these cutoffs (a dry run),
        counted in one read."""
        from agentbox.rules.retention import PruneCounts

        counts = ", ".join(f"(SELECT COUNT(*) {rows})" for rows in _rows_of().values())
        row = self._read().one(f"SELECT {counts}", **cut._asdict())
        assert row is not None
        return PruneCounts(*(int(n) for n in row))

    def prune_step(self, cut: Cutoffs, limit: int) -> PruneCounts:
        """One short transaction removing at most ``limit`` rows (and their history)
        that :mod:`agentbox.rules.retention` lets go, oldest first: done events
        (their keys and payload digests remembered until ``cut.remembered_until``),
        then sent messages, settled dispatches, remembered keys past the window,
        timer history, finished steps (after which their KEY may run again) and what
        runs said they spent. A total below ``limit`` means nothing is left.

        While a key is remembered, ingesting it again is ``duplicate`` (same
        digest) or ``conflict`` (another), with the pruned event's id, and
        nothing is stored.
        """
        from agentbox.rules.retention import PruneCounts

        counts: list[int] = []
        with self._locked() as (tx, _):
            _raise_floors(tx)
            left = limit
            for prune in _KINDS:
                done = prune(tx, cut, left) if left > 0 else 0
                counts.append(done)
                left -= done
        return PruneCounts(*counts)

    def last_prune(self) -> int | None:
        """When a prune last completed here (None: never): what a watcher asks on every
        idle pass, so one read of the inbox's row, not the whole of ``vitals()``."""
        row = self._read().one("SELECT last_prune FROM inboxes WHERE id = :box")
        return None if row is None or row[0] is None else int(row[0])

    def record_prune(self, now: int) -> None:
        """Note that a prune completed at ``now`` (``vitals().last_prune``)."""
        with self._locked() as (tx, _):
            tx.run("UPDATE inboxes SET last_prune = :now WHERE id = :box", now=now)

    def reclaim(self, budget: int) -> int:
        """Hand space freed by pruning back to the disk, a bounded amount per call
        (see :meth:`Engine.reclaim`); 0 when nothing is left to hand back."""
        return self.engine.reclaim(budget)


