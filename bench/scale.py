"""Scale: claim/finish, status, dead list, events list and show on 1,000,000 events vs 10,000.

A last figure: ingest into an inbox remembering the keys of 100,000 pruned
events against one remembering none (synchronous=OFF on both, so the CPU
cost of the check shows rather than the disk's flush).

Both inboxes are made by the engine (the real schema, triggers included)
and then filled with plain SQL in one transaction: mostly done events with
their history (stored, claimed, finished), the same 50 dead events spread
through the table and the same few hundred pending events at the end. The
operations are then timed through the engine, alternating between the two
inboxes; the ratio is big over small, so 1.0 means size costs nothing.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from benchlib import (
    T0,
    Row,
    event_listings,
    events_inbox,
    filled_inbox,
    interleaved,
    median,
    options,
    progress,
    report,
    scale_rows,
    time_row,
    timed,
    warn_if_memory,
    workdir,
)

DEAD = 50
BATCH = 10  # events per claim
HOLDER = "bench:1:cafe"

_REMEMBERED = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :keys)
INSERT INTO pruned_keys (source, source_id, digest, event_id, until)
SELECT 'github', 'pruned-' || i, randomblob(16), i, :t0 + 86400 FROM n"""


def build(path: Path, total: int, pending: int) -> Path:
    return events_inbox(path, total, pending, DEAD)


def main() -> None:
    args = options(__doc__.splitlines()[0])
    if args.quick:
        big, small, claim_rounds, read_rounds = 50_000, 2_000, 5, 20
    else:
        big, small, claim_rounds, read_rounds = 1_000_000, 10_000, 25, 200
    pending = claim_rounds * BATCH * 2 + 10  # warm-up and timed claims never run dry
    from agentbox.location import open_store
    from agentbox.rules.policy import Policy

    policy = Policy(max_batch=BATCH)
    with workdir(args, "scale") as root:
        warn_if_memory(root)
        progress(f"scale: building inboxes of {big:,} and {small:,} events")
        stores = {name: open_store(build(root / f"{name}.sqlite3", n, pending), "")
                  for name, n in (("big", big), ("small", small))}
        for name, s in stores.items():
            dead = len(s.dead())
            if dead != DEAD:
                raise SystemExit(f"{name} inbox has {dead} dead events, not {DEAD}")
        middle = {"big": big // 2, "small": small // 2}

        def events_show(name: str) -> float:
            """`events show ID` of a done event half-way through the inbox."""
            s, event_id = stores[name], middle[name]

            def go() -> None:
                assert s.event(event_id) is not None and len(s.story(event_id)) == 3
            return timed(go)

        rows = scale_rows(f"scale: {{label}}, {big:,} events vs {small:,}", stores, HOLDER,
                          policy, claim_rounds, read_rounds, "subject is the big inbox",
                          extra=[*event_listings(stores), ("events show", events_show)])
        for s in stores.values():
            s.close()
        rows.append(remembered_keys(root, 5_000 if args.quick else 100_000,
                                    5 if args.quick else 60))
    report(rows, args)


def remembered_keys(root: Path, keys: int, rounds: int, per: int = 200) -> Row:
    """Store.ingest with ``keys`` remembered keys against none: the trigger's probe."""
    from agentbox.location import open_store

    stores = {name: open_store(filled_inbox(root / f"keys-{name}.sqlite3",
                                           (_REMEMBERED, {"keys": n, "t0": T0})),
                               "", durable=False)
              for name, n in (("many", keys), ("none", 0))}
    serial = {name: iter(range(10**9)) for name in stores}

    def ingest(name: str) -> float:
        s, ids = stores[name], serial[name]

        def go() -> None:
            for _ in range(per):
                assert s.ingest("github", f"new-{next(ids)}", "{}", T0).outcome == "stored"
        return timed(go) / per

    progress(f"scale: ingest with {keys:,} remembered keys, {rounds} rounds each")
    sides = {name: partial(ingest, name) for name in stores}
    interleaved(1, sides)
    times = interleaved(rounds, sides)
    for s in stores.values():
        s.close()
    return time_row(f"scale: ingest, {keys:,} remembered pruned keys vs none",
                    median(times["many"]), median(times["none"]), 1.5,
                    note=f"median of {rounds} slices of {per} ingests; synchronous=OFF")


if __name__ == "__main__":
    main()
