"""Engine ingest: events per second through `Store.ingest` against raw autocommit inserts.

Each `Store.ingest` is one durable write (key check, event row, pending
count), given the payload as `agentbox ingest` and `serve` give it: checked
and canonical (`jsonutil.parse_payload`, which they do once per delivery; a
program handing the store text pays that parse in the store). The baseline is
one autocommit INSERT of the same row per event into a plain table with only its UNIQUE key, WAL and
synchronous=FULL. A third side runs the same autocommit INSERT into
agentbox's schema, for the row that shows that schema's own cost; a fourth
runs the engine's INSERT by hand inside BEGIN IMMEDIATE ... COMMIT, so the
note can tell what the explicit transaction costs apart from what the
engine's code costs. All run in this process, in alternating slices.
"""

from __future__ import annotations

from benchlib import (
    INSERT_EVENT,
    T0,
    TIMES,
    interleaved,
    make_inbox,
    median,
    options,
    payload,
    plain_inbox,
    progress,
    rate_row,
    raw_connect,
    report,
    slices,
    warn_if_memory,
    workdir,
)

# The bare minimum: one plain INSERT, committed on its own.
RAW_INSERT = """INSERT INTO events (source, source_id, payload, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?)"""


def main() -> None:
    args = options(__doc__.splitlines()[0])
    per_slice, rounds = (10, 6) if args.quick else (25, 80)
    from agentbox.location import open_store

    with workdir(args, "engine-ingest") as root:
        warn_if_memory(root)
        store = open_store(make_inbox(root / "engine.sqlite3"), "")
        raw = raw_connect(plain_inbox(root / "raw.sqlite3"))
        schema = raw_connect(make_inbox(root / "schema.sqlite3"))
        both = raw_connect(make_inbox(root / "both.sqlite3"))
        from agentbox.jsonutil import parse_payload

        bodies = [payload(i) for i in range(per_slice * rounds)]
        checked = [parse_payload(body) for body in bodies]  # what the CLI hands the store

        def insert_raw(i: int) -> None:
            raw.execute(RAW_INSERT, ("github", f"delivery-{i}", bodies[i], T0, T0))

        def insert_schema(i: int) -> None:
            schema.execute(RAW_INSERT, ("github", f"delivery-{i}", bodies[i], T0, T0))

        def insert_both(i: int) -> None:
            """The engine's statement in an explicit transaction, by hand."""
            both.execute("BEGIN IMMEDIATE")
            both.execute(INSERT_EVENT, ("github", f"delivery-{i}", bodies[i], T0, T0)).fetchone()
            both.execute("COMMIT")

        def ingest(i: int) -> None:
            store.ingest("github", f"delivery-{i}", checked[i], T0)

        progress(f"engine ingest: {rounds} slices of {per_slice} events each way")
        rates = interleaved(rounds, {"s": slices(per_slice, ingest),
                                     "b": slices(per_slice, insert_raw),
                                     "o": slices(per_slice, insert_schema),
                                     "h": slices(per_slice, insert_both)})
        stored = store.status().events["pending"]
        for conn in (store, raw, schema, both):
            conn.close()
    if stored != per_slice * rounds:
        raise SystemExit(f"the engine stored {stored} events, not {per_slice * rounds}")
    s, b, o, h = (median(rates[k]) for k in "sboh")
    report([
        rate_row("engine ingest: Store.ingest vs raw autocommit INSERT, plain table", s, b, 0.8,
                 note=f"median of {rounds} slices of {per_slice} durable transactions; the "
                 f"engine's INSERT by hand in BEGIN IMMEDIATE ... COMMIT on its schema: "
                 f"{h:,.0f} ev/s (engine {s / h:.2f}{TIMES} that)"),
        rate_row("engine ingest schema overhead: raw INSERT into agentbox's schema vs a "
                 "plain table", o, b, None,
                 note="the status index and the wider row, paid by any writer of this schema"),
    ], args)


if __name__ == "__main__":
    main()
