"""Start-up: one `agentbox ingest` process against a bare Python process doing the same insert.

A webhook receiver starts agentbox once per delivery, so the whole process
life is the cost: interpreter start, imports, opening the inbox, one durable
transaction, exit. Three programs, run in turn with the same interpreter,
each start in a fresh home holding an empty database:

- subject: the `agentbox` console script in this interpreter's bin, with an
  empty inbox;
- baseline: programs/raw_ingest.py (sqlite3 and json only), with an empty
  plain keyed table;
- Typer baseline: programs/typer_ingest.py, a one-command Typer app doing
  the baseline's insert, so the second ratio is agentbox's own overhead.

`agentbox ingest` ends its process with os._exit once its inbox is closed
and its output flushed, skipping the interpreter's teardown, which the
baselines go through. The overhead's note says what it would be without
that: the same command run by `run()` under a normal exit.
"""

from __future__ import annotations

import sys

from benchlib import (
    PROGRAMS,
    TIMES,
    Homes,
    console_script,
    interleaved,
    median,
    options,
    progress,
    report,
    run_program,
    time_row,
    warn_if_memory,
    workdir,
)

PAYLOAD = '{"action": "opened", "number": 1347, "repo": "octo/bench"}'
# agentbox ingest as the console script runs it, but ending with a normal exit.
TORN_DOWN = "import sys; from agentbox.cli import run; sys.exit(run())"


def main() -> None:
    args = options(__doc__.splitlines()[0])
    rounds = 5 if args.quick else 40
    agentbox = console_script()
    with workdir(args, "startup") as root:
        warn_if_memory(root)
        homes = Homes(root)

        cpu: dict[str, list[float]] = {"s": [], "b": [], "t": [], "n": []}

        def run(side: str, argv: list[str], env: dict[str, str]) -> float:
            wall, used = run_program(argv, env)
            cpu[side].append(used)
            return wall

        def subject() -> float:
            return run("s", [str(agentbox), "ingest", "github", "delivery-1", "--payload", PAYLOAD],
                       homes.agentbox())

        def baseline() -> float:
            return run("b", [sys.executable, str(PROGRAMS / "raw_ingest.py"), str(homes.plain()),
                        "github", "delivery-1", PAYLOAD], homes.env)

        def typer_app() -> float:
            return run("t", [sys.executable, str(PROGRAMS / "typer_ingest.py"), str(homes.plain()),
                        "github", "delivery-1", "--payload", PAYLOAD], homes.env)

        def torn_down() -> float:
            return run("n", [sys.executable, "-c", TORN_DOWN, "ingest", "github", "delivery-1",
                             "--payload", PAYLOAD], homes.agentbox())

        sides = {"s": subject, "b": baseline, "t": typer_app, "n": torn_down}
        progress(f"start-up: {rounds} rounds of {len(sides)} process starts")
        # Warm-up: fills the bytecode and page caches for all of them alike.
        interleaved(2, sides)
        for used in cpu.values():
            used.clear()
        times = interleaved(rounds, sides)
    s, b, t, n = (median(times[k]) for k in "sbtn")
    cs, cb, ct = (median(cpu[k]) * 1000 for k in "sbt")
    report([
        time_row("start-up: agentbox ingest vs bare sqlite3 process", s, b, 4.5,
                 note=f"median of {rounds} process starts each; CPU time {cs:.0f} ms vs "
                 f"{cb:.0f} ms ({cs / cb:.2f}{TIMES})"),
        time_row("start-up overhead: agentbox ingest vs one-command Typer app", s, t, 1.10,
                 note=f"the Typer app does the same insert; CPU time {cs:.0f} ms vs "
                 f"{ct:.0f} ms ({cs / ct:.2f}{TIMES}); with the interpreter's teardown "
                 f"{n * 1000:.1f} ms ({n / t:.2f}{TIMES})"),
    ], args)


if __name__ == "__main__":
    main()
