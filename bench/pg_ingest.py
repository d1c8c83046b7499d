"""PostgreSQL ingest: events per second through `Store.ingest` against bare psycopg inserts.

Each `Store.ingest` on PostgreSQL is one autocommit statement: it stores the
event and adds it to the inbox's pending tally. The baseline is what a
careful bare psycopg program does for a webhook: one autocommit `INSERT ...
ON CONFLICT DO NOTHING RETURNING id` of the same row into a plain table with
only its key. Every side uses `synchronous_commit = on`, in a schema of its
own. Three more sides split the difference into what agentbox does by
design and what its code costs: the same INSERT into agentbox's events table
without the count (the schema's own cost), the engine's statement sent by
hand (INSERT and count), and the same INSERT with the count kept by a row
trigger instead (the other way to keep `status` O(1)).
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
# agentbox's events table without the count: what its schema costs any writer.
EVENT_INSERT = """INSERT INTO events (inbox_id, source, source_id, payload, created_at,
                                      updated_at)
                  VALUES (1, %s, %s, %s, %s, %s)
                  ON CONFLICT (inbox_id, source, source_id) DO NOTHING RETURNING id"""
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
    from agentbox.backends.postgres.engine import _STORE as STORE
    from agentbox.location import open_store

    bodies = [payload(i) for i in range(per_slice * rounds)]
    with (pglib.schema(url, "engine") as engine_url, pglib.schema(url, "plain") as plain_url,
          pglib.schema(url, "schema") as schema_url, pglib.schema(url, "hand") as hand_url,
          pglib.schema(url, "trigger") as trigger_url):
        store = open_store(engine_url, "bench")
        plain, schema, hand, trigger = (pglib.session(u) for u in (plain_url, schema_url,
                                                                   hand_url, trigger_url))
        plain.execute(PLAIN)
        for statement in TRIGGERED:
            trigger.execute(statement)
        with open_store(hand_url, "bench") as made:
            made.instance_id()  # makes the inbox row the statement writes to
            box = made.inbox_id

        def ingest(i: int) -> None:
            store.ingest("github", f"delivery-{i}", bodies[i], T0)

        def insert_plain(i: int) -> None:
            plain.execute(PLAIN_INSERT, ("github", f"delivery-{i}", bodies[i], T0)).fetchone()

        def insert_event(i: int) -> None:
            schema.execute(EVENT_INSERT,
                           ("github", f"delivery-{i}", bodies[i], T0, T0)).fetchone()

        def insert_hand(i: int) -> None:
            hand.execute(STORE, {"box": box, "source": "github", "source_id": f"delivery-{i}",
                                  "payload": bodies[i], "now": T0}).fetchone()

        def insert_triggered(i: int) -> None:
            trigger.execute(TRIGGERED_INSERT,
                            ("github", f"delivery-{i}", bodies[i], T0, T0)).fetchone()

        progress(f"pg ingest: {rounds} slices of {per_slice} durable statements each way")
        rates = interleaved(rounds, {"s": slices(per_slice, ingest),
                                     "b": slices(per_slice, insert_plain),
                                     "o": slices(per_slice, insert_event),
                                     "h": slices(per_slice, insert_hand),
                                     "t": slices(per_slice, insert_triggered)})
        stored = store.status().events["pending"]
        conns: list[Any] = [store, plain, schema, hand, trigger]
        for conn in conns:
            conn.close()
    if stored != per_slice * rounds:
        raise SystemExit(f"the engine stored {stored} events, not {per_slice * rounds}")
    s, b, o, h, t = (median(rates[k]) for k in "sboht")
    slices_note = f"median of {rounds} slices of {per_slice} autocommit statements"
    report([
        rate_row("pg ingest: Store.ingest vs bare psycopg INSERT, plain table", s, b, 0.8,
                 note=f"{slices_note}, synchronous_commit on; the engine's statement by hand: "
                 f"{h:,.0f} ev/s (engine {s / h:.2f}{TIMES} that)"),
        rate_row("pg ingest schema overhead: INSERT into agentbox's events vs a plain table",
                 o, b, None, note="the status index and the wider row, paid by any writer"),
        rate_row("pg ingest statement overhead: the engine's statement (pending count, wake "
                 "check, pruned-key guard) vs the INSERT alone", h, o, None,
                 note=f"what keeps status O(1), wakes a sleeping watcher and refuses a pruned "
                 f"key's redelivery; the count alone, kept by a row trigger: {t:,.0f} ev/s "
                 f"({t / o:.2f}{TIMES} the INSERT alone)"),
    ], args)


if __name__ == "__main__":
    main()
