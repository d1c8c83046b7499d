"""Rehearsal: a week of 10,000 recorded events replayed with a trivial handler, against the
same runs made live.

The traffic is one event a minute for 10,000 minutes (about a week of a busy
inbox); the handler is ``printf`` answering one message, a real process each
run, as a handler is. The rehearsal replays it on its simulated clock into a
scratch inbox: a run at every arrival, the outbox dispatched whenever its gap
allows. The baseline makes the same runs live: each event ingested into a
durable inbox file, then a run of the same Worker and handler until nothing is
left, then a dispatch when one may go, with no waiting in between (a live
inbox would spend the week waiting). The target: at most 1.5 times the live runs,
and at most 60 s in all.
"""

from __future__ import annotations

import resource
import time

from benchlib import T0, make_inbox, options, progress, report, time_row, workdir

ANSWER = '{"messages": ["ok"]}'
EVERY = 60  # seconds between arrivals
TARGET = 1.5
LIMIT_S = 60.0


def cpu() -> float:
    """CPU seconds of this process and its reaped children so far: load from other
    programs disturbs them far less than wall time."""
    own, kids = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                     resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def traffic(count: int):  # type: ignore[no-untyped-def]
    from agentbox.jsonutil import canonical
    from agentbox.rehearsal.traffic import Arrival, Header, Recording

    end = T0 + count * EVERY
    arrivals = [Arrival(T0 + i * EVERY, "chat", f"m{i}", canonical({"n": i}))
                for i in range(count)]
    return Recording(Header("bench", None, None, None, end, {}), arrivals)


def live(path: str, recorded, argv: list[str]) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """The same runs made live on a durable inbox; seconds taken and messages sent."""
    from agentbox.dispatcher import Dispatcher, PrintSender
    from agentbox.location import open_store
    from agentbox.rules.policy import Policy
    from agentbox.worker import CommandHandler, Worker, run_until_empty

    sent = [0]
    clock = [T0]
    policy = Policy()
    with open_store(path, "bench") as store:
        worker = Worker(store, policy, CommandHandler(argv, policy.handler_timeout), "bench",
                        store.location, lambda: clock[0])
        dispatcher = Dispatcher(store, policy, PrintSender(lambda _: sent.__setitem__(
            0, sent[0] + 1)), lambda: clock[0])
        start = time.perf_counter()
        for arrival in recorded.arrivals:
            clock[0] = arrival.at
            store.ingest(arrival.source, arrival.key, arrival.payload, arrival.at)
            run_until_empty(worker)
            if store.status().outbox["held"]:
                while dispatcher.dispatch_once().dispatch is not None:
                    pass
        return time.perf_counter() - start, sent[0]


def main() -> None:
    args = options(__doc__.splitlines()[0])
    count = 200 if args.quick else 10_000
    from agentbox.rehearsal import rehearse
    from agentbox.rules.policy import Policy

    argv = ["printf", ANSWER]
    recorded = traffic(count)
    with workdir(args, "rehearse") as root:
        progress(f"live: {count} events, one run each")
        used = cpu()
        live_s, live_sent = live(str(make_inbox(root / "live.sqlite3")), recorded, argv)
        live_cpu, used = cpu() - used, cpu()
        progress(f"rehearsal: the same {count} events")
        start = time.perf_counter()
        done = rehearse(recorded, Policy(), argv, "bench")
        rehearsal_s = time.perf_counter() - start
        rehearsal_cpu = cpu() - used
    runs = done.totals["runs"]
    errors = abs(runs - count) + len(done.failures) + abs(done.totals["sends"] - live_sent)
    report([time_row(f"rehearse {count:,} recorded events, trivial handler, vs the same "
                     "runs live", rehearsal_s, live_s, TARGET,
                     note=f"{runs} runs and {done.totals['sends']} sends rehearsed, "
                     f"{live_sent} sent live; the handler is a process each run; CPU "
                     f"{rehearsal_cpu:.1f} s rehearsed, {live_cpu:.1f} s live",
                     errors=errors, limit_s=None if args.quick else LIMIT_S)], args)


if __name__ == "__main__":
    main()
