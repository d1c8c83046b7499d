"""Timers: one scheduler pass over 100,000 timers with 100 due against 1,000 with 100 due.

The inboxes are made by the engine and filled with plain SQL: 100 timers due
every minute, all due at the first pass, and the rest far in the future.
Each pass (`Store.tick`) turns the 100 due timers into events and moves
them on a minute, so the next pass, a minute later, again finds 100 due.
It is done twice: with `--every 1m` timers, and with cron timers
(`* * * * *` in America/New_York; the idle ones `0 8 * * 1-5`). Three
ratios: big over small for each kind (what idle timers cost a pass), and a
pass of cron timers over one of `--every` timers (what reading a calendar
costs beside storing the events).
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
ZONE = "America/New_York"

_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
INSERT INTO timers (name, due, every, payload, catch_up, done, created_at, cron, tz)
SELECT printf('timer-%06d', i),
       CASE WHEN i <= :due THEN :t0 ELSE :t0 + 10000000 + i END,
       CASE WHEN :cron THEN NULL WHEN i <= :due THEN :every ELSE 86400 END,
       '{"job":"check"}', 'coalesce', 0, :t0,
       CASE WHEN NOT :cron THEN NULL WHEN i <= :due THEN '* * * * *' ELSE '0 8 * * 1-5' END,
       CASE WHEN :cron THEN :zone END
FROM n"""


def build(path: Path, total: int, cron: bool) -> Path:
    return filled_inbox(path, (_FILL, {"total": total, "due": DUE, "t0": T0, "every": EVERY,
                                       "cron": cron, "zone": ZONE}))


def main() -> None:
    args = options(__doc__.splitlines()[0])
    big, small, rounds = (20_000, 1_000, 6) if args.quick else (100_000, 1_000, 40)
    from agentbox.location import open_store

    kinds = {f"{size} {kind}": (n, kind == "cron")
             for size, n in (("big", big), ("small", small)) for kind in ("every", "cron")}
    with workdir(args, "timers") as root:
        warn_if_memory(root)
        progress(f"timers: building inboxes of {big:,} and {small:,} timers, every and cron")
        stores = {name: open_store(build(root / f"{name.replace(' ', '-')}.sqlite3", n, cron),
                                   "")
                  for name, (n, cron) in kinds.items()}
        passes = dict.fromkeys(stores, 0)

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
        times = interleaved(rounds + 1, {name: (lambda n=name: tick(n)) for name in stores})
        for s in stores.values():
            s.close()
    # The first pass of each is a warm-up.
    pass_ = {name: median(figures[1:]) for name, figures in times.items()}
    note = f"median of {rounds} passes"
    report([
        time_row(f"timers: scheduler pass, {big:,} timers vs {small:,} ({DUE} due)",
                 pass_["big every"], pass_["small every"], 2.0,
                 note=f"{note}; subject is the big inbox"),
        time_row(f"timers: scheduler pass, {big:,} cron timers vs {small:,} ({DUE} due)",
                 pass_["big cron"], pass_["small cron"], 2.0,
                 note=f"{note}; subject is the big inbox"),
        time_row(f"timers: a pass of {DUE} due cron timers vs {DUE} --every timers",
                 pass_["small cron"], pass_["small every"], 3.0,
                 note=f"{note}; {small:,} timers each; subject is cron"),
    ], args)


if __name__ == "__main__":
    main()
