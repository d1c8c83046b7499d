"""Timers: one scheduler pass over 100,000 timers with 100 due against 1,000 with 100 due.

Both inboxes are made by the engine and filled with plain SQL: 100 timers
every minute, all due at the first pass, and the rest far in the future.
Each pass (`Store.tick`) turns the 100 due timers into events and moves
them on a minute, so the next pass, a minute later, again finds 100 due.
The ratio is big over small: what the idle timers cost a pass.
"""

from __future__ import annotations

from pathlib import Path

from benchlib import (
    T0,
    filled_inbox,
    interleaved,
    median,
    options,
    progress,
    report,
    time_row,
    timed,
    warn_if_memory,
    workdir,
)

DUE = 100
EVERY = 60

_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
INSERT INTO timers (name, due, every, payload, catch_up, done, created_at)
SELECT printf('timer-%06d', i),
       CASE WHEN i <= :due THEN :t0 ELSE :t0 + 10000000 + i END,
       CASE WHEN i <= :due THEN :every ELSE 86400 END,
       '{"job":"check"}', 'coalesce', 0, :t0
FROM n"""


def build(path: Path, total: int) -> Path:
    return filled_inbox(path, (_FILL, {"total": total, "due": DUE, "t0": T0, "every": EVERY}))


def main() -> None:
    args = options(__doc__.splitlines()[0])
    big, small, rounds = (20_000, 1_000, 6) if args.quick else (100_000, 1_000, 40)
    from agentbox.backends.sqlite.store import SqliteStore

    with workdir(args, "timers") as root:
        warn_if_memory(root)
        progress(f"timers: building inboxes of {big:,} and {small:,} timers")
        stores = {name: SqliteStore(build(root / f"{name}.sqlite3", n))
                  for name, n in (("big", big), ("small", small))}
        passes = {name: 0 for name in stores}

        def tick(name: str) -> float:
            now = T0 + passes[name] * EVERY
            passes[name] += 1

            def go() -> None:
                handled = stores[name].tick(now)
                if handled != DUE:
                    raise SystemExit(f"a pass over the {name} inbox handled {handled} "
                                     f"timers, not {DUE}")
            return timed(go)

        progress(f"timers: {rounds} passes each")
        times = interleaved(rounds + 1, {"big": lambda: tick("big"),
                                         "small": lambda: tick("small")})
        for s in stores.values():
            s.close()
    # The first pass of each is a warm-up.
    report([time_row(f"timers: scheduler pass, {big:,} timers vs {small:,} ({DUE} due)",
                     median(times["big"][1:]), median(times["small"][1:]), 2.0,
                     note=f"median of {rounds} passes; subject is the big inbox")], args)


if __name__ == "__main__":
    main()
