"""PostgreSQL ingest: events per second through `Store.ingest` against bare psycopg inserts.

Each `Store.ingest` on PostgreSQL is one autocommit statement: it stores the
event, counts it in the inbox's tallies and, for a key already taken, reads
the standing copy back. The baseline is what a careful bare psycopg program
does for a webhook: one autocommit `INSERT ... ON CONFLICT DO NOTHING
RETURNING id` of the same row into a plain table with the same key. Both use
`synchronous_commit = on`, each in a schema of its own. Three more sides
feed the note, with `synchronous_commit = off` because the wait for the
fsync hides what the statements themselves cost: the engine, its statement
sent by hand (what the engine's Python costs), and the same insert with the
count kept by a row trigger instead (the other way to keep `status` O(1)).
"""

from __future__ import annotations

from typing import Any

import pglib
from benchlib import (
    T0,
    TIMES,
    interleaved,
    median,
    options,
    payload,
    progress,
    rate_row,
    report,
    slices,
)

PLAIN = """CREATE TABLE plain (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source text COLLATE "C" NOT NULL, source_id text COLLATE "C" NOT NULL,
    payload text NOT NULL, created_at bigint NOT NULL,
    UNIQUE (source, source_id))"""
PLAIN_INSERT = """INSERT INTO plain (source, source_id, payload, created_at)
                  VALUES (%s, %s, %s, %s) ON CONFLICT (source, source_id) DO NOTHING
                  RETURNING id"""
# The events table again, its count kept per row by a trigger instead of in the statement.
TRIGGERED = ["""CREATE TABLE counted_by_trigger (LIKE events INCLUDING ALL)""",
             """CREATE FUNCTION count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
                    VALUES (NEW.inbox_id, 'events', NEW.status, 1 + mod(pg_backend_pid(), 31), 1)
                    ON CONFLICT (inbox_id, tbl, state, slot)
                    DO UPDATE SET n = state_counts.n + 1;
                    RETURN NULL;
                END $$""",
             """CREATE TRIGGER counted AFTER INSERT ON counted_by_trigger
                FOR EACH ROW EXECUTE FUNCTION count_insert()"""]
TRIGGERED_INSERT = """INSERT INTO counted_by_trigger (inbox_id, source, source_id, payload,
                                                      created_at, updated_at)
                      VALUES (1, %s, %s, %s, %s, %s)
                      ON CONFLICT (inbox_id, source, source_id) DO NOTHING RETURNING id"""


def main() -> None:
    args = options(__doc__.splitlines()[0])
    url = pglib.server(args)
    per_slice, rounds = (10, 6) if args.quick else (50, 60)
    from agentbox.backends.postgres.inbox import STORE
    from agentbox.backends.postgres.store import PostgresStore

    bodies = [payload(i) for i in range(per_slice * rounds)]
    with (pglib.schema(url, "engine") as engine_url, pglib.schema(url, "plain") as plain_url,
          pglib.schema(url, "fast") as fast_url, pglib.schema(url, "hand") as hand_url,
          pglib.schema(url, "trigger") as trigger_url):
        store = PostgresStore(engine_url, "bench")
        fast = PostgresStore(fast_url, "bench", synchronous="OFF")
        plain = pglib.session(plain_url)
        hand, trigger = (pglib.session(u, "OFF") for u in (hand_url, trigger_url))
        plain.execute(PLAIN)
        for statement in TRIGGERED:
            trigger.execute(statement)
        with PostgresStore(hand_url, "bench") as made:
            made.instance_id()  # makes the inbox row the statement writes to
            box = made.inbox_id

        def ingest(i: int) -> None:
            store.ingest("github", f"delivery-{i}", bodies[i], T0)

        def ingest_fast(i: int) -> None:
            fast.ingest("github", f"delivery-{i}", bodies[i], T0)

        def insert_plain(i: int) -> None:
            plain.execute(PLAIN_INSERT, ("github", f"delivery-{i}", bodies[i], T0)).fetchone()

        def insert_hand(i: int) -> None:
            hand.execute(STORE, {"box": box, "source": "github", "source_id": f"delivery-{i}",
                                  "payload": bodies[i], "now": T0}).fetchone()

        def insert_triggered(i: int) -> None:
            trigger.execute(TRIGGERED_INSERT,
                            ("github", f"delivery-{i}", bodies[i], T0, T0)).fetchone()

        progress(f"pg ingest: {rounds} slices of {per_slice} durable statements each way")
        rates = interleaved(rounds, {"s": slices(per_slice, ingest),
                                     "b": slices(per_slice, insert_plain),
                                     "e": slices(per_slice, ingest_fast),
                                     "h": slices(per_slice, insert_hand),
                                     "t": slices(per_slice, insert_triggered)})
        stored = store.status().events["pending"]
        conns: list[Any] = [store, fast, plain, hand, trigger]
        for conn in conns:
            conn.close()
    if stored != per_slice * rounds:
        raise SystemExit(f"the engine stored {stored} events, not {per_slice * rounds}")
    s, b, e, h, t = (median(rates[k]) for k in "sbeht")
    report([rate_row("pg ingest: Store.ingest vs bare psycopg INSERT", s, b, 0.8,
                     note=f"median of {rounds} slices of {per_slice} autocommit statements, "
                     f"synchronous_commit on. Without the fsync wait: the engine {e:,.0f} "
                     f"ev/s, its statement by hand {h:,.0f} ev/s (engine {e / h:.2f}{TIMES} "
                     f"that), counting by row trigger instead {t:,.0f} ev/s "
                     f"({t / h:.2f}{TIMES} the engine's statement)")], args)


if __name__ == "__main__":
    main()
