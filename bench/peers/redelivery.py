"""Peers, redelivery: how fast each side refuses keys it already holds, and whether it does.

Every side first stores the same N = 5,000 keys (not timed), then is handed
all of them again, one durable enqueue call each, in slices interleaved
between the sides as in enqueue.py. The rate is each side's median over its
slices; then each side counts what it holds: a side that keeps N items
refused every redelivery, one that keeps 2N stored each key twice (huey,
which has no dedupe feature, does so by design; its rate is that of a
second enqueue). No worker runs meanwhile, so every item is still waiting
(procrastinate's and pgqueuer's keys refuse only then: drain.py redelivers
after the items were handled).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

from peerlib import peer_env, peer_row, pg_server, report, require_extra

from benchlib import (
    interleaved,
    median,
    options,
    payload,
    progress,
    slices,
    warn_if_memory,
    workdir,
)
from systems import System, by_backend, enqueuers


def main() -> None:
    args = options(__doc__.splitlines()[0])
    require_extra(args)
    keys, rounds = (200, 4) if args.quick else (5000, 20)
    per_slice = keys // rounds
    url = pg_server(args)
    with workdir(args, "peers-redelivery") as root, ExitStack() as stack:
        warn_if_memory(root)
        systems = enqueuers(stack, root, url, peer_env(root))
        bodies = [payload(i) for i in range(keys)]
        progress(f"peers redelivery: {keys} keys stored by each of {len(systems)} sides")
        unstored = sum(not s.enqueue(f"item-{i}", bodies[i]) for s in systems
                       for i in range(keys))
        again = {s.label + s.backend: 0 for s in systems}

        def side(system: System) -> Callable[[], float]:
            name = system.label + system.backend

            def step(i: int) -> None:
                again[name] += system.enqueue(f"item-{i}", bodies[i])
            return slices(per_slice, step)

        progress(f"peers redelivery: the same keys again, {rounds} slices of {per_slice}")
        rates = interleaved(rounds, {s.label + s.backend: side(s) for s in systems})
        held = {s.label + s.backend: s.held() for s in systems}

    def name(system: System) -> str:
        return system.label + system.backend

    rows = []
    for ours, peer in by_backend(systems):
        what = f"agentbox vs {peer.label} ({peer.backend})"
        note = (f"{keys:,} keys stored, then each delivered again; median of {rounds} slices "
                f"of {per_slice}; stored twice: agentbox {again[name(ours)]:,}, "
                f"{peer.label} {again[name(peer)]:,}")
        rows += [peer_row(f"redelivery of {keys:,} known keys: {what}", median(rates[name(ours)]),
                          median(rates[name(peer)]), "ev/s", True, note, errors=unstored),
                 peer_row(f"redelivery, items held after (of {keys:,} keys): {what}",
                          held[name(ours)], held[name(peer)], "items", False, note,
                          errors=unstored)]
    report(rows, args)


if __name__ == "__main__":
    main()
