"""Run cycle: acquire + claim + finish + release per event, engine against hand-written SQL.

One cycle is what `agentbox run` does to the database for one event (the
handler left out): take the lease, claim one pending event, mark it done,
release the lease, four transactions, of which the claim and the finish wait
for the disk (lease writes need not: see agentbox.backends.sqlite.lease). The
baseline issues the same statements the engine does (lease fence, requeue
and dead checks, history rows) straight through sqlite3, with the same two
commits made durable, into its own inbox holding the same events.
"""

from __future__ import annotations

import sqlite3

from benchlib import (
    INSERT_HISTORY,
    T0,
    engine_cycle,
    hand_cycle,
    interleaved,
    make_inbox,
    median,
    options,
    payload,
    progress,
    rate_row,
    raw_connect,
    report,
    slices,
    warn_if_memory,
    workdir,
)

TTL = 120
MAX_ATTEMPTS = 3
HOLDER = "bench:1:cafe"
# The lease is columns of the inbox's own row (one row in a file).
LEASE = "SELECT lease_holder, lease_generation, lease_until, lease_released FROM inboxes"


class HandWritten:
    """The statements of one run, written out as a careful bare-sqlite3 program would."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _holds(self, generation: int, now: int) -> bool:
        row = self.conn.execute(LEASE).fetchone()
        return (row is not None and row[0] == HOLDER and row[1] == generation and row[2] >= now
                and not row[3])

    def _lease_write(self) -> None:
        """A lease commit need not wait for the disk: the next durable one carries it."""
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("BEGIN IMMEDIATE")

    def _lease_commit(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA synchronous=FULL")

    def acquire(self, now: int) -> int:
        c = self.conn
        self._lease_write()
        row = c.execute(LEASE).fetchone()
        generation = (1 if row[0] is None else row[1] + 1 if row[3] or row[2] < now
                      else row[1])
        c.execute("""UPDATE inboxes SET lease_holder = ?, lease_generation = ?,
                         lease_until = ?, lease_released = 0 WHERE id = 1""",
                  (HOLDER, generation, now + TTL))
        self._lease_commit()
        return generation

    def claim(self, generation: int, now: int) -> list[int]:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        assert self._holds(generation, now)
        abandoned = c.execute("""SELECT id, attempts, claim_gen FROM events
                                 WHERE status = 'running' AND claim_gen < ?""",
                              (generation,)).fetchall()
        assert not abandoned
        c.execute("""UPDATE events SET status = 'dead', updated_at = ?,
                         error = 'too many attempts (' || attempts || ')'
                     WHERE status = 'pending' AND attempts >= ? RETURNING id""",
                  (now, MAX_ATTEMPTS)).fetchall()
        c.execute("""SELECT id FROM events WHERE status = 'pending' AND attempts > 0
                     AND available_at <= ? ORDER BY id LIMIT 1""", (now,)).fetchone()
        claimed = c.execute(
            """UPDATE events SET status = 'running', attempts = attempts + 1, claim_gen = ?,
                   updated_at = ? WHERE id IN (SELECT id FROM events WHERE status = 'pending'
                   AND available_at <= ? ORDER BY id LIMIT 1) RETURNING id, attempts""",
            (generation, now, now)).fetchall()
        c.executemany(INSERT_HISTORY, [(now, "event", str(i), "claimed", generation,
                                        f"attempt {n}") for i, n in claimed])
        c.execute("COMMIT")
        return [i for i, _ in claimed]

    def finish(self, generation: int, now: int, ids: list[int]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        assert self._holds(generation, now)
        mine = c.execute(f"""SELECT COUNT(*) FROM events WHERE id IN ({",".join("?" * len(ids))})
                             AND status = 'running' AND claim_gen = ?""",
                         [*ids, generation]).fetchone()[0]
        assert mine == len(ids)
        c.executemany("UPDATE events SET status = 'done', error = NULL, updated_at = ? "
                      "WHERE id = ?", [(now, i) for i in ids])
        c.executemany(INSERT_HISTORY, [(now, "event", str(i), "finished", generation, None)
                                       for i in ids])
        c.execute("COMMIT")

    def release(self, generation: int, now: int) -> None:
        c = self.conn
        self._lease_write()
        assert self._holds(generation, now)
        c.execute("UPDATE inboxes SET lease_until = ?, lease_released = 1 WHERE id = 1", (now,))
        self._lease_commit()



def main() -> None:
    args = options(__doc__.splitlines()[0])
    per_slice, rounds = (5, 6) if args.quick else (10, 60)
    total = per_slice * rounds
    from agentbox.location import open_store
    from agentbox.rules.policy import Policy

    policy = Policy(max_batch=1, max_attempts=MAX_ATTEMPTS, lease_ttl=TTL)
    events = [("github", f"delivery-{i}", payload(i)) for i in range(total)]
    with workdir(args, "run-cycle") as root:
        warn_if_memory(root)
        store = open_store(make_inbox(root / "engine.sqlite3"), "")
        store.ingest_many(events, T0)
        prepared = open_store(make_inbox(root / "raw.sqlite3"), "")
        prepared.ingest_many(events, T0)
        prepared.close()
        hand = HandWritten(raw_connect(root / "raw.sqlite3"))

        progress(f"run cycle: {rounds} slices of {per_slice} events each way")
        rates = interleaved(rounds, {
            "s": slices(per_slice, lambda _: engine_cycle(store, HOLDER, TTL, policy)),
            "b": slices(per_slice, lambda _: hand_cycle(hand))})
        done = (store.status().events["done"],
                hand.conn.execute("SELECT n FROM state_counts WHERE tbl = 'events' "
                                  "AND state = 'done'").fetchone()[0])
        store.close()
        hand.conn.close()
    if done != (total, total):
        raise SystemExit(f"events done (engine, hand-written): {done}, expected {total} each")
    report([rate_row("run cycle: acquire+claim+finish+release, engine vs hand SQL",
                     median(rates["s"]), median(rates["b"]), 0.7,
                     note=f"median of {rounds} slices of {per_slice} one-event cycles "
                     "(4 transactions each, 2 durable)")], args)


if __name__ == "__main__":
    main()
