"""Engine ingest: events per second through `Store.ingest` against raw autocommit inserts.

Each `Store.ingest` is one durable BEGIN IMMEDIATE transaction (key check,
event row, history row); the baseline is one autocommit INSERT of the same
event row per event into the same schema (its triggers included), with
WAL and synchronous=FULL. Both run in this process, in alternating slices,
each into its own inbox, so the figure is what the engine adds per event
on top of the fsync that dominates both.
"""

from __future__ import annotations

from benchlib import (
    T0,
    interleaved,
    make_inbox,
    median,
    options,
    payload,
    progress,
    rate_row,
    raw_connect,
    report,
    timed,
    warn_if_memory,
    workdir,
)

# The bare minimum: one plain INSERT, committed on its own.
RAW_INSERT = """INSERT INTO events (source, source_id, payload, created_at, updated_at)
                VALUES (?, ?, ?, ?, ?)"""


def main() -> None:
    args = options(__doc__.splitlines()[0])
    per_slice, rounds = (10, 6) if args.quick else (25, 80)
    from agentbox.engine.store import SqliteStore

    with workdir(args, "engine-ingest") as root:
        warn_if_memory(root)
        store = SqliteStore(make_inbox(root / "engine.sqlite3"))
        raw = raw_connect(make_inbox(root / "raw.sqlite3"))
        bodies = [payload(i) for i in range(per_slice * rounds)]
        next_engine = iter(range(len(bodies)))
        next_raw = iter(range(len(bodies)))

        def subject() -> float:
            def go() -> None:
                for _ in range(per_slice):
                    i = next(next_engine)
                    store.ingest("github", f"delivery-{i}", bodies[i], T0)
            return per_slice / timed(go)

        def baseline() -> float:
            def go() -> None:
                for _ in range(per_slice):
                    i = next(next_raw)
                    raw.execute(RAW_INSERT, ("github", f"delivery-{i}", bodies[i], T0, T0))
            return per_slice / timed(go)

        progress(f"engine ingest: {rounds} slices of {per_slice} events each way")
        rates = interleaved(rounds, {"s": subject, "b": baseline})
        stored = store.status().events["pending"]
        store.close()
        raw.close()
    if stored != per_slice * rounds:
        raise SystemExit(f"the engine stored {stored} events, not {per_slice * rounds}")
    report([rate_row("engine ingest: Store.ingest vs raw autocommit INSERT",
                     median(rates["s"]), median(rates["b"]), 0.8,
                     note=f"median of {rounds} slices of {per_slice} durable transactions")],
           args)


if __name__ == "__main__":
    main()
