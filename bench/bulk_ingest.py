"""Bulk ingest: `agentbox ingest --jsonl -` of 20,000 events against a bare sqlite3 process.

All sides are real processes reading the same JSON lines on stdin. The
baseline (programs/raw_ingest.py --jsonl-many) parses every line and stores
the events in one transaction with one ``executemany`` into a plain table
with only its UNIQUE key: the least a program can do. agentbox also checks
every line strictly, keeps its history, counts and indexes, commits in
chunks and prints a report line per event (sent to /dev/null). The second
row sets it beside the same program storing row by row, reading each row's
id back (``--jsonl``), as a program that reports per event must; the third
is that program writing into agentbox's schema instead of the plain table:
the cost of that schema alone. The last sets the executemany program parsing
and writing its JSON with orjson (``--jsonl-many --orjson``) beside the same
program using json: what the faster library alone is worth to a bare program.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


def lines(n: int) -> bytes:
    return b"".join(
        json.dumps({"source": "github", "source_id": f"delivery-{i}",
                    "payload": {"action": "opened", "number": i, "repo": "octo/bench",
                                "text": "please look at this"}}).encode() + b"\n"
        for i in range(n))


def main() -> None:
    args = options(__doc__.splitlines()[0])
    n, rounds = (2_000, 2) if args.quick else (20_000, 7)
    agentbox = console_script()
    body = lines(n)
    with workdir(args, "bulk") as root:
        warn_if_memory(root)
        homes = Homes(root)

        cpu: dict[str, list[float]] = {"s": [], "m": [], "b": [], "o": [], "j": []}

        def run(side: str, argv: list[str], env: dict[str, str]) -> float:
            wall, used = run_program(argv, env, body)
            cpu[side].append(used)
            return wall

        def subject() -> float:
            return run("s", [str(agentbox), "ingest", "--jsonl", "-"], homes.agentbox())

        def raw(side: str, db: Path, *mode: str) -> float:
            return run(side, [sys.executable, str(PROGRAMS / "raw_ingest.py"), str(db),
                              *(mode or ["--jsonl"])], homes.env)

        sides = {"s": subject, "m": lambda: raw("m", homes.plain(), "--jsonl-many"),
                 "b": lambda: raw("b", homes.plain()), "o": lambda: raw("o", homes.inbox()),
                 "j": lambda: raw("j", homes.plain(), "--jsonl-many", "--orjson")}
        progress(f"bulk ingest: {rounds} rounds of {n:,} events, five ways")
        interleaved(1, sides)  # warm-up: bytecode and page cache
        for used in cpu.values():
            used.clear()
        times = interleaved(rounds, sides)
    cs, cm, cb, co, cj = (median(cpu[k]) * 1000 for k in "smboj")
    s, m, b, o, j = (median(times[k]) for k in "smboj")
    report([
        time_row(f"bulk ingest: --jsonl of {n:,} events vs a bare executemany program, "
                 "plain table", s, m, 2.0, note=f"median of {rounds} runs each; CPU time "
                 f"{cs:.0f} ms vs {cm:.0f} ms ({cs / cm:.2f}{TIMES})"),
        time_row(f"bulk ingest: --jsonl of {n:,} events vs a bare program storing row by "
                 "row, plain table", s, b, 2.0, note=f"each row's id read back, as a report "
                 f"per event needs; CPU time {cs:.0f} ms vs {cb:.0f} ms ({cs / cb:.2f}{TIMES})"),
        time_row("bulk ingest schema overhead: the bare program into agentbox's schema "
                 "vs a plain table", o, b, None,
                 note=f"history, per-state counts and the status index, paid by any writer; "
                 f"CPU time {co:.0f} ms vs {cb:.0f} ms"),
        time_row("bulk ingest, orjson alone: the bare executemany program parsing with orjson "
                 "vs with json", j, m, None,
                 note=f"what the library is worth to a bare program; CPU time {cj:.0f} ms vs "
                 f"{cm:.0f} ms; --jsonl against this program: {s / j:.2f}{TIMES} "
                 f"(CPU {cs / cj:.2f}{TIMES})", shown="what a faster parser gives"),
    ], args)


if __name__ == "__main__":
    main()
