"""PostgreSQL run cycle: acquire + claim + finish + release per event, engine against hand SQL.

One cycle is what `agentbox run` does to the database for one event (the
handler left out): take the lease, claim one pending event, mark it done,
release the lease, four durable transactions, each holding the inbox's row
lock. The baseline is the same work written out by hand as a careful bare
psycopg program would: each step a transaction of plain statements (lease
fence under the row lock, requeue and dead checks, the claim, history rows),
into its own schema holding the same events. Two more sides, for the note,
compare the two ways to serialise an inbox without the fsync wait that
hides them (``synchronous_commit = off``): the hand-written cycle under the
row lock, and under a transaction-scoped advisory lock on the inbox, which
needs the lease read as a statement of its own.
"""

from __future__ import annotations

from typing import Any

import pglib
from benchlib import (
    T0,
    TIMES,
    engine_cycle,
    hand_cycle,
    interleaved,
    median,
    options,
    payload,
    progress,
    rate_row,
    report,
    slices,
)

TTL = 120
MAX_ATTEMPTS = 3
HOLDER = "bench:1:cafe"
HISTORY = """INSERT INTO history (inbox_id, at, subject, subject_id, action, generation, detail)
             VALUES (%s, %s, 'event', %s, %s, %s, %s)"""


class HandWritten:
    """The statements of one run, written out by hand; ``advisory`` picks the inbox lock."""

    def __init__(self, conn: Any, box: int, advisory: bool = False) -> None:
        self.conn, self.box, self.advisory = conn, box, advisory

    def _lock(self) -> tuple[Any, ...]:
        """Take the inbox lock; the lease under it."""
        c = self.conn
        if self.advisory:
            c.execute("SELECT pg_advisory_xact_lock(1, %s)", (self.box,))
            query = "SELECT lease_holder, lease_generation, lease_until FROM inboxes WHERE id = %s"
        else:
            query = """SELECT lease_holder, lease_generation, lease_until FROM inboxes
                       WHERE id = %s FOR NO KEY UPDATE"""
        row = c.execute(query, (self.box,)).fetchone()
        assert row is not None
        return tuple(row)

    def _holds(self, generation: int, now: int) -> bool:
        holder, held, until = self._lock()
        return bool(holder == HOLDER and held == generation and until >= now)

    def acquire(self, now: int) -> int:
        with self.conn.transaction():
            holder, generation, until = self._lock()
            generation = 1 if holder is None else generation + 1 if until < now else generation
            self.conn.execute("""UPDATE inboxes SET lease_holder = %s, lease_generation = %s,
                                     lease_until = %s WHERE id = %s""",
                              (HOLDER, generation, now + TTL, self.box))
        return int(generation)

    def claim(self, generation: int, now: int) -> list[int]:
        c, box = self.conn, self.box
        with c.transaction():
            assert self._holds(generation, now)
            abandoned = c.execute("""SELECT id FROM events WHERE inbox_id = %s
                                     AND status = 'running' AND claim_gen < %s""",
                                  (box, generation)).fetchall()
            assert not abandoned
            c.execute("""UPDATE events SET status = 'dead', updated_at = %s,
                             error = 'too many attempts (' || attempts || ')'
                         WHERE inbox_id = %s AND status = 'pending' AND attempts >= %s""",
                      (now, box, MAX_ATTEMPTS))
            c.execute("""SELECT id FROM events WHERE inbox_id = %s AND status = 'pending'
                         AND attempts > 0 AND available_at <= %s ORDER BY id LIMIT 1""",
                      (box, now)).fetchone()
            claimed = c.execute(
                """UPDATE events SET status = 'running', attempts = attempts + 1,
                       claim_gen = %s, updated_at = %s
                   WHERE id IN (SELECT id FROM events WHERE inbox_id = %s
                                AND status = 'pending' AND available_at <= %s
                                ORDER BY id LIMIT 1)
                   RETURNING id, attempts""", (generation, now, box, now)).fetchall()
            for event_id, attempts in claimed:
                c.execute(HISTORY, (box, now, str(event_id), "claimed", generation,
                                    f"attempt {attempts}"))
        return [int(i) for i, _ in claimed]

    def finish(self, generation: int, now: int, ids: list[int]) -> None:
        c, box = self.conn, self.box
        with c.transaction():
            assert self._holds(generation, now)
            mine = c.execute("""SELECT COUNT(*) FROM events WHERE inbox_id = %s
                                AND id = ANY(%s) AND status = 'running' AND claim_gen = %s""",
                             (box, ids, generation)).fetchone()
            assert mine is not None and mine[0] == len(ids)
            c.execute("""UPDATE events SET status = 'done', error = NULL, updated_at = %s
                         WHERE inbox_id = %s AND id = ANY(%s)""", (now, box, ids))
            for event_id in ids:
                c.execute(HISTORY, (box, now, str(event_id), "finished", generation, None))

    def release(self, generation: int, now: int) -> None:
        with self.conn.transaction():
            assert self._holds(generation, now)
            self.conn.execute("UPDATE inboxes SET lease_until = %s WHERE id = %s",
                              (now - 1, self.box))



def main() -> None:
    args = options(__doc__.splitlines()[0])
    url = pglib.server(args)
    per_slice, rounds = (5, 6) if args.quick else (20, 40)
    total = per_slice * rounds
    from agentbox.location import open_store
    from agentbox.rules.policy import Policy

    policy = Policy(max_batch=1, max_attempts=MAX_ATTEMPTS, lease_ttl=TTL)
    events = [("github", f"delivery-{i}", payload(i)) for i in range(total)]
    with (pglib.schema(url, "engine") as engine_url, pglib.schema(url, "hand") as hand_url,
          pglib.schema(url, "rowlock") as row_url, pglib.schema(url, "advisory") as advisory_url):
        store = open_store(engine_url, "bench")
        store.ingest_many(events, T0)
        hands = []
        for side_url, synchronous, advisory in ((hand_url, "FULL", False),
                                                (row_url, "OFF", False),
                                                (advisory_url, "OFF", True)):
            with open_store(side_url, "bench") as prepared:
                prepared.ingest_many(events, T0)
                assert prepared.inbox_id is not None
                hands.append(HandWritten(pglib.session(side_url, synchronous),
                                         prepared.inbox_id, advisory))
        hand, row_hand, advisory_hand = hands

        progress(f"pg run cycle: {rounds} slices of {per_slice} events each way")
        rates = interleaved(rounds, {
            "s": slices(per_slice, lambda _: engine_cycle(store, HOLDER, TTL, policy)),
            "b": slices(per_slice, lambda _: hand_cycle(hand)),
            "r": slices(per_slice, lambda _: hand_cycle(row_hand)),
            "a": slices(per_slice, lambda _: hand_cycle(advisory_hand))})
        done = [store.status().events["done"]]
        for side_url, side in zip((hand_url, row_url, advisory_url), hands, strict=True):
            with open_store(side_url, "bench") as seen:
                done.append(seen.status().events["done"])
            side.conn.close()
        store.close()
    if done != [total] * 4:
        raise SystemExit(f"events done (engine, hand, row lock, advisory lock): {done}, "
                         f"expected {total} each")
    s, b, r, a = (median(rates[k]) for k in "sbra")
    report([rate_row("pg run cycle: acquire+claim+finish+release, engine vs hand SQL", s, b,
                     0.7, note=f"median of {rounds} slices of {per_slice} one-event cycles "
                     f"(4 durable transactions each). Without the fsync wait, the "
                     f"hand-written cycle under the inbox's row lock: {r:,.0f} ev/s, under "
                     f"an advisory lock: {a:,.0f} ev/s ({a / r:.2f}{TIMES})")], args)


if __name__ == "__main__":
    main()
