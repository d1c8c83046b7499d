"""Concurrency: 8 processes ingesting into one inbox at once against one process alone.

Each worker is a separate process that opens the inbox, says it is ready
and waits; on the word go it stores its share of the events through
`Store.ingest`, one durable transaction each, and reports its start, end
and errors. Both sides store the same number of events into fresh copies
of the same empty inbox; the figure is total events per second from the
first start to the last end. Writers queue on the busy timeout (BEGIN
IMMEDIATE), so no worker may see an error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from benchlib import (
    T0,
    Homes,
    interleaved,
    median,
    options,
    payload,
    progress,
    rate_row,
    report,
    warn_if_memory,
    workdir,
)

WORKERS = 8


def worker(path: str, count: int, prefix: str) -> None:
    """One ingesting process: open, wait for go, store ``count`` events, report."""
    from agentbox.location import open_store

    store = open_store(path, "")
    bodies = [payload(i) for i in range(count)]
    print("ready", flush=True)
    sys.stdin.readline()
    errors: list[str] = []
    start = time.monotonic()
    for i in range(count):
        try:
            store.ingest("github", f"{prefix}-{i}", bodies[i], T0)
        except Exception as exc:  # every failure counts, whatever its kind
            errors.append(f"{type(exc).__name__}: {exc}")
    end = time.monotonic()
    store.close()
    print(json.dumps({"start": start, "end": end, "stored": count - len(errors),
                      "errors": errors[:5], "error_count": len(errors)}), flush=True)


def main() -> None:
    args = options(__doc__.splitlines()[0])
    total, rounds = (160, 2) if args.quick else (1_600, 7)
    failures: list[str] = []
    error_count = 0
    with workdir(args, "concurrency") as root:
        warn_if_memory(root)
        homes = Homes(root)

        def run(processes: int) -> float:
            nonlocal error_count
            inbox = homes.inbox()
            share = total // processes
            procs = [subprocess.Popen(
                [sys.executable, __file__, "--worker", str(inbox), str(share), f"w{k}"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=homes.env)
                for k in range(processes)]
            for p in procs:
                assert p.stdout is not None
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit("a worker did not start")
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            results = []
            for p in procs:
                out, _ = p.communicate(timeout=600)
                if p.returncode != 0:
                    raise SystemExit(f"a worker exited {p.returncode}")
                results.append(json.loads(out))
            stored: int = sum(r["stored"] for r in results)
            error_count += sum(r["error_count"] for r in results)
            failures.extend(e for r in results for e in r["errors"])
            window: float = max(r["end"] for r in results) - min(r["start"] for r in results)
            return stored / window

        progress(f"concurrency: {rounds} rounds of {total:,} events, "
                 f"1 process and {WORKERS} processes")
        rates = interleaved(rounds, {"one": lambda: run(1), "many": lambda: run(WORKERS)})
    for failure in sorted(set(failures))[:5]:
        progress(f"concurrency error: {failure}")
    report([rate_row(f"concurrency: {WORKERS} processes vs 1, total ingest rate",
                     median(rates["many"]), median(rates["one"]), 0.7,
                     note=f"median of {rounds} rounds of {total:,} events; errors must be 0",
                     errors=error_count)], args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
