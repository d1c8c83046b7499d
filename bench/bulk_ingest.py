"""Bulk ingest: `agentbox ingest --jsonl -` of 20,000 events against a bare sqlite3 process.

Both are real processes reading the same JSON lines on stdin, each into its
own copy of the same empty inbox. The baseline (programs/raw_ingest.py
--jsonl) parses every line and stores all events and their history rows in a
single transaction; agentbox also checks every line strictly, commits every
1,000 lines and prints a report line per event (sent to /dev/null).
"""

from __future__ import annotations

import json
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

        cpu: dict[str, list[float]] = {"s": [], "b": []}

        def run(side: str, argv: list[str], env: dict[str, str]) -> float:
            wall, used = run_program(argv, env, body)
            cpu[side].append(used)
            return wall

        def subject() -> float:
            return run("s", [str(agentbox), "ingest", "--jsonl", "-"], homes.agentbox())

        def baseline() -> float:
            return run("b", [sys.executable, str(PROGRAMS / "raw_ingest.py"), str(homes.inbox()),
                        "--jsonl"], homes.env)

        progress(f"bulk ingest: {rounds} rounds of {n:,} events each way")
        interleaved(1, {"s": subject, "b": baseline})  # warm-up: bytecode and page cache
        for used in cpu.values():
            used.clear()
        times = interleaved(rounds, {"s": subject, "b": baseline})
    cs, cb = (median(cpu[k]) * 1000 for k in "sb")
    report([time_row(f"bulk ingest: --jsonl of {n:,} events vs one raw transaction",
                     median(times["s"]), median(times["b"]), 2.0,
                     note=f"median of {rounds} runs each; CPU time {cs:.0f} ms vs {cb:.0f} ms "
                     f"({cs / cb:.2f}{TIMES})")], args)


if __name__ == "__main__":
    main()
