"""Peers, latency: from an enqueue returning to the worker's task starting; idle CPU.

Every side's own worker runs the whole time: agentbox's `run --watch`
starts a handler program per batch, which notes the time first; each peer's
worker calls a function task that does the same (apps/stamps.py). Two
agentbox handlers are measured: a shell script (`date >> file`, then read
stdin: what a small real handler costs) and the cheapest handler possible,
a compiled C program that notes the time and exits (programs/stamp.c;
left out where no C compiler is found). This process enqueues one item at a
time through each side's own API (systems.py), going round the sides with
the order rotating, and waits for each task to start (and 10 ms more) before
the next; so each side gets an item about once a second. Then nothing is
enqueued for a while, and the CPU each worker (with any child) uses
meanwhile is its idle cost.

Workers keep their own defaults: huey's consumer polls, from 0.1 s backing off
to 10 s while idle; DBOS's queue is polled once a second; procrastinate and
pgqueuer are woken by LISTEN/NOTIFY, as agentbox is on PostgreSQL (inotify
on SQLite).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from peerlib import PEERS, peer_env, peer_row, pg_server, report, require_extra, tree_cpu

from benchlib import (
    Row,
    options,
    payload,
    percentile,
    progress,
    wait,
    warn_if_memory,
    workdir,
)
from systems import STAMP_SH, System, Worker, by_backend, enqueuers, handler_script

SHELL, CHEAPEST = "agentbox", "agentbox, C handler"


def compiled_stamp(root: Path) -> list[str] | None:
    """programs/stamp.c built under ``root``; None without a C compiler."""
    compiler = shutil.which("cc")
    if compiler is None:
        progress("latency: no C compiler (cc), so the cheapest handler is left out")
        return None
    binary = root / "stamp"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(PEERS / "programs" / "stamp.c")],
                   check=True)
    return [str(binary)]


def main() -> None:
    args = options(__doc__.splitlines()[0])
    require_extra(args)
    items, quiet = (5, 3.0) if args.quick else (100, 10.0)
    url = pg_server(args)
    with workdir(args, "peers-latency") as root, ExitStack() as stack:
        warn_if_memory(root)
        env = peer_env(root)
        handlers = {SHELL: handler_script(root, "stamp.sh", STAMP_SH)}
        cheapest = compiled_stamp(root)
        if cheapest is not None:
            handlers[CHEAPEST] = cheapest
        systems = enqueuers(stack, root, url, env, handlers, guard=False)
        workers: dict[str, Worker] = {}
        for n, system in enumerate(systems):
            workers[name(system)] = worker = Worker(system, root, f"worker{n}", env)
            stack.callback(worker.stop)
        delays: dict[str, list[float]] = {name(s): [] for s in systems}
        progress(f"latency: {items} items to each of {len(systems)} workers, one at a time")
        for k in range(-1, items):  # the first round (-1) warms every worker up
            turn = systems[k % len(systems):] + systems[:k % len(systems)]
            for system in turn:
                delay = handed(system, workers[name(system)], f"item{k + 1}", k + 2)
                if k >= 0:
                    delays[name(system)].append(delay)
        idle = idle_cpu(workers, quiet)
        for worker in workers.values():
            worker.stop()
    report(rows(systems, delays, idle, items, quiet), args)


def name(system: System) -> str:
    return f"{system.label} ({system.backend})"


def handed(system: System, worker: Worker, key: str, count: int) -> float:
    """Enqueue one item; how long after the enqueue returned its task started."""
    assert system.enqueue(key, payload(count)), f"{system.label} refused a fresh key"
    began = time.time()
    found: list[float] = []

    def started() -> bool:
        worker.check()
        at = system.started(worker.stamps, key, count)
        if at is not None:
            found.append(at)
        return bool(found)

    wait(started, f"{system.label}'s task of {key}", every=0.002)
    time.sleep(0.01)  # the task ends and its worker records it before the next side's item
    return found[0] - began


def idle_cpu(workers: dict[str, Worker], seconds: float) -> dict[str, float]:
    """The share of a core each worker (with its children) uses over a quiet spell."""
    time.sleep(1.0)
    progress(f"idle CPU: {seconds:.0f} s with nothing to do")
    before = {n: tree_cpu(w.proc.pid) for n, w in workers.items()}
    time.sleep(seconds)
    return {n: (tree_cpu(w.proc.pid) - before[n]) / seconds * 100 for n, w in workers.items()}


def rows(systems: list[System], delays: dict[str, list[float]], idle: dict[str, float],
         items: int, quiet: float) -> list[Row]:
    def ms(side: str, share: float) -> float:
        return percentile(delays[side], share)

    def brief(side: str) -> str:
        return f"{side} {ms(side, .5) * 1000:.1f}/{ms(side, .99) * 1000:.1f} ms"

    found: list[Row] = []
    labels = [SHELL, *([CHEAPEST] if any(s.label == CHEAPEST for s in systems) else [])]
    for label in labels:
        handler = "sh handler" if label == SHELL else "C handler"
        for ours, peer in by_backend(systems, label):
            note = (f"{items} items, one at a time; agentbox starts a {handler} process per "
                    f"batch, {peer.label} calls a function in its worker; p50/p99 "
                    f"{brief(name(ours))}, {brief(name(peer))}")
            for share, tag in ((.5, "p50"), (.99, "p99")):
                found.append(peer_row(
                    f"latency {tag}: enqueue → start, agentbox's {handler} process vs "
                    f"{peer.label}'s function ({peer.backend})", ms(name(ours), share) * 1000,
                    ms(name(peer), share) * 1000, "ms", False, note))
    for ours, peer in by_backend(systems):
        found.append(peer_row(
            f"idle CPU: agentbox run --watch vs {peer.label}'s worker ({peer.backend})",
            idle[name(ours)], idle[name(peer)], "% CPU", False,
            note=f"share of one core over {quiet:.0f} s with nothing to do, children "
            f"included: agentbox {idle[name(ours)]:.3f} %, {peer.label} "
            f"{idle[name(peer)]:.3f} %"))
    return found


if __name__ == "__main__":
    main()
