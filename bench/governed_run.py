"""Governed run cycle: usage recorded and budgets checked before each claim, against none.

One cycle is a run's database work for one event (the handler left out): the
lease, the gate a run asks before claiming (pauses, and with a budget the local
day's usage summed in the inbox's zone), the claim, the finish (with the
answer's usage recorded) and the release. The baseline is the same cycle with
no budget set and no usage in the answer, into its own inbox holding the same
events, so the ratio is what the checks cost a run.

A second row times the budget check alone (``Store.gate``) on an inbox whose
day holds 5,000 runs that reported usage against one whose day holds 96, one
in each quarter hour: the check adds up the day's quarter-hour totals, so the
ratio says whether its cost grows with the day's runs.
"""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import benchlib as bl

TTL = 120
HOLDER = "bench:1:cafe"


def cycle(store: object, policy: object, answer: object, zone: ZoneInfo | None,
          at: int = bl.T0) -> int:
    """acquire, gate, claim, finish, release at ``at``: what a worker does for one
    event."""
    from agentbox.calendar import local_day

    generation = store.acquire(HOLDER, at, TTL)  # type: ignore[attr-defined]
    assert generation is not None
    day = local_day(at, zone) if zone is not None else (at, at)
    assert store.gate(at, day, policy) is None  # type: ignore[attr-defined]
    claimed = store.claim(HOLDER, generation, at, policy)  # type: ignore[attr-defined]
    assert claimed
    assert store.finish(HOLDER, generation, at,  # type: ignore[attr-defined]
                        [e.id for e in claimed], answer)
    assert store.release(HOLDER, generation, at)  # type: ignore[attr-defined]
    return len(claimed)


def day_of_runs(store: object, runs: int, start: int, policy: object,
                answer: object) -> None:
    """``runs`` whole runs spread evenly over the day from ``start``, each reporting
    ``answer``'s usage."""
    step = 86_400 // runs
    for n in range(runs):
        at = start + n * step
        store.ingest("github", f"day-{n}", "{}", at)  # type: ignore[attr-defined]
        cycle(store, policy, answer, None, at)


def gate_row(root: Path, quick: bool, policy: object, answer: object) -> bl.Row:
    """The budget check on a day of 5,000 runs against a day of 96, one a quarter hour."""
    from agentbox.location import open_store

    big, small, rounds = (500, 96, 200) if quick else (5_000, 96, 2_000)
    start = bl.T0 - bl.T0 % 86_400
    day = (start, start + 86_400)
    stores = {}
    for name, runs in (("big", big), ("small", small)):
        stores[name] = open_store(bl.make_inbox(root / f"gate-{name}.sqlite3"), "",
                                  durable=False)  # building is not what is measured
        day_of_runs(stores[name], runs, start, policy, answer)
    bl.progress(f"budget check: a day of {big:,} runs vs {small}, {rounds} rounds")
    times = bl.interleaved(rounds, {
        name: (lambda s=s: bl.timed(lambda: s.gate(day[1] - 1, day, policy)))
        for name, s in stores.items()})
    for s in stores.values():
        s.close()
    return bl.time_row(f"budget check before a claim: a day of {big:,} runs vs {small}",
                       bl.median(times["big"]), bl.median(times["small"]), 1.5,
                       note=f"median of {rounds}; Store.gate with both daily budgets set, "
                       "never reached")


def main() -> None:
    args = bl.options(__doc__.splitlines()[0])
    per_slice, rounds = (5, 6) if args.quick else (10, 60)
    total = per_slice * rounds
    from agentbox.location import open_store
    from agentbox.rules.answer import Answer, Usage
    from agentbox.rules.policy import Policy

    plain = Policy(max_batch=1, lease_ttl=TTL)
    budgeted = plain._replace(budget_tokens_per_day=10**12, budget_cost_per_day=10.0**9)
    spent = Answer(usage=Usage(tokens=1200, cost=0.01))
    zone = ZoneInfo("Europe/Berlin")
    events = [("github", f"delivery-{i}", bl.payload(i)) for i in range(total)]
    with bl.workdir(args, "governed-run") as root:
        bl.warn_if_memory(root)
        governed = open_store(bl.make_inbox(root / "governed.sqlite3"), "")
        governed.ingest_many(events, bl.T0)
        free = open_store(bl.make_inbox(root / "free.sqlite3"), "")
        free.ingest_many(events, bl.T0)
        bl.progress(f"governed run cycle: {rounds} slices of {per_slice} events each way")
        rates = bl.interleaved(rounds, {
            "s": bl.slices(per_slice, lambda _: cycle(governed, budgeted, spent, zone)),
            "b": bl.slices(per_slice, lambda _: cycle(free, plain, Answer(), None))})
        done = (governed.status().events["done"], free.status().events["done"],
                len(governed.usage()))
        governed.close()
        free.close()
        gate = gate_row(root, args.quick, budgeted, spent)
    if done != (total, total, total):
        raise SystemExit(f"events done (governed, free) and usage rows: {done}, expected "
                         f"{total} each")
    bl.report([bl.rate_row("run cycle with usage recorded and budgets checked vs none",
                           bl.median(rates["s"]), bl.median(rates["b"]), 1 / 1.05,
                           note=f"median of {rounds} slices of {per_slice} one-event cycles; "
                           "the budget never reached"), gate], args)


if __name__ == "__main__":
    main()
