"""Peers, durable enqueue: items per second, one per transaction, each with a dedupe key.

agentbox's in-process `inbox.ingest` against each peer's own enqueue in this
process, each with the dedupe feature it has (systems.py says which), all
as durable as agentbox: on SQLite huey (without and with a dedupe guard)
and DBOS; on PostgreSQL procrastinate, pgqueuer and DBOS. Every side
stores fresh keys in slices, the slices of all sides interleaved with the
order rotating; the figure is each side's median rate.
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
    per_slice, rounds = (10, 4) if args.quick else (25, 60)
    url = pg_server(args)
    refused = [0]
    with workdir(args, "peers-enqueue") as root, ExitStack() as stack:
        warn_if_memory(root)
        systems = enqueuers(stack, root, url, peer_env(root))
        bodies = [payload(i) for i in range(per_slice * rounds)]

        def side(system: System) -> Callable[[], float]:
            def step(i: int) -> None:
                if not system.enqueue(f"item-{i}", bodies[i]):
                    refused[0] += 1
            return slices(per_slice, step)

        progress(f"peers enqueue: {rounds} slices of {per_slice} items, {len(systems)} sides")
        rates = interleaved(rounds, {s.label + s.backend: side(s) for s in systems})
        held = {s.label + s.backend: s.held() for s in systems}
    expected = per_slice * rounds
    errors = refused[0] + sum(abs(n - expected) for n in held.values())
    report([peer_row(f"enqueue with dedupe key: agentbox vs {peer.label} ({peer.backend})",
                     median(rates[ours.label + ours.backend]),
                     median(rates[peer.label + peer.backend]), "ev/s", True,
                     note=f"median of {rounds} slices of {per_slice} durable enqueues, one "
                     "transaction each" + ("; huey has no dedupe feature"
                                           if peer.label == "huey" else ""),
                     errors=errors)
            for ours, peer in by_backend(systems)], args)


if __name__ == "__main__":
    main()
