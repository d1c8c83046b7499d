"""Peers, drain: how fast each side's own worker handles N = 5,000 items waiting for it.

Every side first stores the same N keys (not timed, no worker running), then
its worker starts: agentbox's `run --watch` hands batches of up to 100 events
(`max_batch = 100`, its default, written in the home's config) to a shell
handler noting when each batch starts and ends; each peer's worker, with its
own defaults, runs a function task per item noting its start. The drain time
runs from the first task's start to the last one's (for agentbox, the last
batch's end), so neither the worker's start-up nor the enqueue is in it.

Then every key is delivered again, the worker still running, and each side
counts how many it stored again: the keys of procrastinate and pgqueuer
refuse only while a job holding them waits, so a key redelivered after its
job ran is a new job; agentbox keeps the key for the event's life, DBOS the
workflow id for its record's, and the huey guard for as long as its key.
Each round gives every side a fresh store, the order rotating.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from peerlib import keyed_stamps, peer_env, peer_row, pg_server, report, require_extra

from benchlib import Row, median, options, payload, progress, wait, warn_if_memory, workdir
from systems import DRAIN_SH, Agentbox, Huey, System, Worker, by_backend, enqueuers, handler_script

MAX_BATCH = 100
# How often this process looks for the end of a drain: the workers note their own times, so
# this only decides how soon the next step starts; seldom, so as not to take their CPU.
POLL = 0.2


def main() -> None:
    args = options(__doc__.splitlines()[0])
    require_extra(args)
    keys, rounds, settle = (200, 1, 1.0) if args.quick else (5000, 2, 3.0)
    url = pg_server(args)
    times: dict[str, list[float]] = {}
    again: dict[str, list[int]] = {}
    twice: dict[str, list[int]] = {}
    with workdir(args, "peers-drain") as root:
        warn_if_memory(root)
        env = peer_env(root)
        handler = {"agentbox": handler_script(root, "drain.sh", DRAIN_SH)}
        for r in range(rounds):
            with ExitStack() as stack:
                place = root / f"round{r}"
                systems = enqueuers(stack, place, url, env, handler)
                for system in systems:
                    if isinstance(system, Agentbox):
                        Path(system.env["AGENTBOX_HOME"], "config.toml").write_text(
                            f"max_batch = {MAX_BATCH}\n")
                progress(f"drain round {r + 1}/{rounds}: {keys} items into each of "
                         f"{len(systems)} sides")
                for system in systems:
                    if sum(system.enqueue(f"item-{i}", payload(i)) for i in range(keys)) != keys:
                        raise SystemExit(f"{system.label} refused fresh keys")
                turn = systems[r % len(systems):] + systems[:r % len(systems)]
                for n, system in enumerate(turn):
                    progress(f"drain: {name(system)}")
                    seconds, stored, handled = drain(system, Worker(system, place, f"w{n}", env),
                                                     keys, settle)
                    times.setdefault(name(system), []).append(seconds)
                    again.setdefault(name(system), []).append(stored)
                    twice.setdefault(name(system), []).append(handled)
    report(rows(systems, keys, rounds, times, again, twice), args)


def name(system: System) -> str:
    return f"{system.label} ({system.backend})"


def drain(system: System, worker: Worker, keys: int, settle: float) -> tuple[float, int, int]:
    """Run the worker until all ``keys`` items are handled, then redeliver every key:
    the drain's seconds, how many keys were stored again, and how many items the worker
    started more than once by ``settle`` seconds later."""
    def reached(count: Callable[[], int], target: int) -> Callable[[], bool]:
        def check() -> bool:
            worker.check()
            return count() >= target
        return check

    try:
        if isinstance(system, Agentbox):
            ends = Path(f"{worker.stamps}.end")
            wait(reached(lambda: lines(ends), math.ceil(keys / MAX_BATCH)), "every batch", 600,
                 POLL)
            wait(reached(lambda: system.status()["done"], keys), "every event done", 60, 0.2)
            seconds = float(ends.read_text().split()[-1]) - float(
                worker.stamps.read_text().split()[0])
        else:
            wait(reached(lambda: len(keyed_stamps(worker.stamps)), keys), "every item", 600,
                 POLL)
            starts = sorted(t for ts in keyed_stamps(worker.stamps).values() for t in ts)
            seconds = starts[-1] - starts[0]
        stored = sum(system.enqueue(f"item-{i}", payload(i)) for i in range(keys))
        time.sleep(settle)
        if isinstance(system, Agentbox):  # an event is handled once: only a new one is again
            handled = system.status()["done"] - keys
        else:
            handled = sum(len(ts) > 1 for ts in keyed_stamps(worker.stamps).values())
    finally:
        worker.stop()
    return seconds, stored, handled


def lines(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


def rows(systems: list[System], keys: int, rounds: int, times: dict[str, list[float]],
         again: dict[str, list[int]], twice: dict[str, list[int]]) -> list[Row]:
    found: list[Row] = []
    for ours, peer in by_backend(systems):
        a, p = name(ours), name(peer)
        note = (f"median of {rounds} round(s); agentbox: batches of up to {MAX_BATCH}, a "
                f"process each; {peer.label}: a function call per item, its worker's "
                f"defaults; medians, stored again after handled: agentbox {median(again[a]):.0f}"
                f", {peer.label} {median(again[p]):.0f}; started twice: agentbox "
                f"{median(twice[a]):.0f}, {peer.label} {median(twice[p]):.0f}")
        if not (isinstance(peer, Huey) and peer.guard):  # its worker is huey's
            found.append(peer_row(f"drain {keys:,} items: agentbox vs {p}",
                                  keys / median(times[a]), keys / median(times[p]), "ev/s",
                                  True, note))
        found.append(peer_row(f"redelivery after handled, stored again (of {keys:,}): "
                              f"agentbox vs {p}", median(again[a]), median(again[p]), "items",
                              False, note))
    return found


if __name__ == "__main__":
    main()
