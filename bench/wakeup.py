"""Wake-up: how a watcher learns of another process's commit, three ways, side by side.

Three watcher processes look at the same inbox at once, so load from other
programs hits them alike:

- subject: the store's own waiter (`Store.waiter()`: an inotify ring on the
  inbox's folder, confirmed by `PRAGMA data_version`);
- baseline: a loop reading `PRAGMA data_version` every 50 ms, the simplest
  watcher one could write;
- also tried: a loop reading the size and time of the `-wal` file every
  50 ms, confirming with `data_version` once they move.

This process commits events through `Store.ingest` at random intervals
(50-150 ms) and notes when each commit returned; each watcher notes when it
saw the commit. Then nothing is written for a while, and the CPU time each
watcher uses meanwhile is its idle cost.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (
    Row,
    cpu_seconds,
    make_inbox,
    options,
    percentile,
    progress,
    report,
    time_row,
    warn_if_memory,
    workdir,
)

POLL = 0.05
MODES = ("waiter", "version", "stat")
IDLE_LIMIT = 1.0  # % of one core an idle watcher may use


def watch(mode: str, path: str) -> None:
    """A watcher process: prints "ready", then "ID TIME" for every commit it sees."""
    conn = sqlite3.connect(path, isolation_level=None)

    def version() -> int:
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def seen() -> None:
        newest = conn.execute("SELECT MAX(id) FROM events").fetchone()[0]
        print(newest, time.time(), flush=True)

    print("ready", flush=True)
    if mode == "waiter":
        from agentbox.location import open_store

        store = open_store(path, "")
        conn = store.engine.conn
        waiter = store.waiter()
        while True:
            if waiter.wait(3600):
                seen()
    last = version()
    wal, stamp, moved = Path(path + "-wal"), None, False
    while True:
        time.sleep(POLL)
        if mode == "stat":
            info = wal.stat()
            moved = moved or (info.st_size, info.st_mtime_ns) != stamp
            stamp = (info.st_size, info.st_mtime_ns)
            if not moved:
                continue
        now = version()
        if now != last:
            last, moved = now, False
            seen()


def main() -> None:
    args = options(__doc__.splitlines()[0])
    commits, idle = (20, 3.0) if args.quick else (200, 10.0)
    from agentbox.location import open_store

    with workdir(args, "wakeup") as root:
        warn_if_memory(root)
        path = make_inbox(root / "inboxes" / "bench.sqlite3")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        procs = {mode: subprocess.Popen([sys.executable, __file__, "--watch", mode, str(path)],
                                        stdout=subprocess.PIPE, text=True, env=env)
                 for mode in MODES}
        for proc in procs.values():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a watcher did not start")
        time.sleep(1.0)  # let each settle into its loop
        progress(f"wake-up: {commits} commits seen by {len(MODES)} watchers, "
                 f"then {idle:.0f} s idle")
        committed: dict[int, float] = {}
        with open_store(path, "") as store:
            for n in range(commits):
                time.sleep(random.uniform(0.05, 0.15))
                event = store.ingest("bench", f"e{n}", "{}", int(time.time()))
                committed[event.id] = time.time()
        time.sleep(1.0)  # the last commit reaches every watcher
        before = {mode: cpu_seconds(proc.pid) for mode, proc in procs.items()}
        time.sleep(idle)
        used = {mode: (cpu_seconds(proc.pid) - before[mode]) / idle * 100
                for mode, proc in procs.items()}
        latency: dict[str, list[float]] = {}
        for mode, proc in procs.items():
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
            seen = [line.split() for line in out.splitlines()]
            latency[mode] = [float(at) - committed[int(i)] for i, at in seen
                             if int(i) in committed]
    missed = {mode: commits - len(found) for mode, found in latency.items()}
    for mode, count in missed.items():
        if count:
            progress(f"wake-up: the {mode} watcher saw {commits - count} of {commits} commits "
                     "one by one (two came between its looks)")

    def p(mode: str, share: float) -> float:
        return percentile(latency[mode], share)

    note = (f"{commits} commits 50-150 ms apart; p50/p99 of each watcher's delay: waiter "
            f"{p('waiter', .5) * 1000:.1f}/{p('waiter', .99) * 1000:.1f} ms, "
            f"data_version {p('version', .5) * 1000:.1f}/{p('version', .99) * 1000:.1f} ms, "
            f"wal stat {p('stat', .5) * 1000:.1f}/{p('stat', .99) * 1000:.1f} ms")
    idle_note = (f"CPU over {idle:.0f} s idle: waiter {used['waiter']:.3f} %, data_version "
                 f"{used['version']:.3f} %, wal stat {used['stat']:.3f} %")
    report([
        time_row("wake-up p50: store waiter (inotify) vs data_version poll every 50 ms",
                 p("waiter", .5), p("version", .5), 0.5, note),
        time_row("wake-up p99: store waiter (inotify) vs data_version poll every 50 ms",
                 p("waiter", .99), p("version", .99), 1.0, note),
        time_row("wake-up p50: -wal stat poll every 50 ms vs data_version poll",
                 p("stat", .5), p("version", .5), 1.5, note),
        Row("idle CPU: store waiter vs data_version poll every 50 ms", used["waiter"],
            used["version"], "% CPU", 1.0, False, idle_note, limit=IDLE_LIMIT),
        Row("idle CPU: -wal stat poll vs data_version poll", used["stat"], used["version"],
            "% CPU", 1.5, False, idle_note, limit=IDLE_LIMIT),
    ], args)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watch"]:
        watch(sys.argv[2], sys.argv[3])
    else:
        main()
