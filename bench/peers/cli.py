"""Peers, one CLI process per item: `agentbox ingest` against the peers' own enqueue commands.

A webhook receiver that starts a program per delivery pays its whole life:
interpreter, imports, connection, one durable transaction, exit. Of the
peers, procrastinate (`procrastinate --app=... defer TASK JSON
--queueing-lock KEY`) and pgqueuer (`pgq queue ENTRYPOINT PAYLOAD
--dedupe-key KEY --on-conflict skip`) have such a command, both on
PostgreSQL; huey and DBOS have none (huey's CLI runs the consumer, DBOS's
manages workflows already stored). So the figure is `agentbox ingest` on
PostgreSQL (`AGENTBOX_DB`) against each, a fresh key per process, the
processes of all sides started in turn with the order rotating; the note
gives `agentbox ingest` on SQLite and each side's CPU time.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

from peerlib import peer_env, peer_row, pg_server, report, require_extra, skip

from benchlib import (
    Row,
    interleaved,
    median,
    options,
    payload,
    progress,
    run_program,
    warn_if_memory,
    workdir,
)
from systems import Pgqueuer, Procrastinate, System, agentbox_pg, agentbox_sqlite


def main() -> None:
    args = options(__doc__.splitlines()[0])
    require_extra(args)
    rounds = 5 if args.quick else 40
    url = pg_server(args)
    if url is None:
        skip(args, "no PostgreSQL server, where the peers with an enqueue command keep jobs")
    with workdir(args, "peers-cli") as root, ExitStack() as stack:
        warn_if_memory(root)
        env = peer_env(root)
        systems: list[System] = [agentbox_pg(stack, url, root / "agentbox-pg", ()),
                                 Procrastinate(stack, url), Pgqueuer(stack, url, env),
                                 agentbox_sqlite(root / "agentbox", ())]
        for system in systems:
            stack.callback(system.close)
        cpu: dict[str, list[float]] = {name(s): [] for s in systems}
        serial = iter(range(10**9))

        def side(system: System) -> Callable[[], float]:
            def one() -> float:
                n = next(serial)
                argv = system.cli(f"cli-{n}", payload(n))
                assert argv is not None
                wall, used = run_program(argv, {**env, **system.env})
                cpu[name(system)].append(used)
                return wall
            return one

        sides = {name(s): side(s) for s in systems}
        progress(f"peers CLI: {rounds} rounds of {len(sides)} process starts")
        interleaved(2, sides)  # warm-up: bytecode and page caches, for every side alike
        for used in cpu.values():
            used.clear()
        times = interleaved(rounds, sides)
    report(rows(systems, times, cpu, rounds), args)


def name(system: System) -> str:
    return f"{system.label} ({system.backend})"


def rows(systems: list[System], times: dict[str, list[float]], cpu: dict[str, list[float]],
         rounds: int) -> list[Row]:
    ours, lite = name(systems[0]), name(systems[-1])

    def ms(side: str) -> str:
        return f"{median(times[side]) * 1000:.1f} ms (CPU {median(cpu[side]) * 1000:.0f} ms)"

    return [peer_row(f"one CLI process per item: agentbox ingest vs {peer.label} "
                     f"({peer.backend})", median(times[ours]) * 1000,
                     median(times[name(peer)]) * 1000, "ms", False,
                     note=f"median of {rounds} process starts each; agentbox {ms(ours)}, "
                     f"{peer.label} {ms(name(peer))}; agentbox ingest on SQLite {ms(lite)}")
            for peer in systems[1:-1]]


if __name__ == "__main__":
    main()
