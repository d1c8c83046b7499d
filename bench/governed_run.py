"""Governed run cycle: usage recorded and budgets checked before each claim, against none.

One cycle is a run's database work for one event (the handler left out): the
lease, the gate a run asks before claiming (pauses, and with a budget the local
day's usage summed in the inbox's zone), the claim, the finish (with the
answer's usage recorded) and the release. The baseline is the same cycle with
no budget set and no usage in the answer, into its own inbox holding the same
events, so the ratio is what the checks cost a run.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

import benchlib as bl

TTL = 120
HOLDER = "bench:1:cafe"


def cycle(store: object, policy: object, answer: object, zone: ZoneInfo | None) -> int:
    """acquire, gate, claim, finish, release: what a worker does for one event."""
    from agentbox.calendar import local_day

    generation = store.acquire(HOLDER, bl.T0, TTL)  # type: ignore[attr-defined]
    assert generation is not None
    day = local_day(bl.T0, zone) if zone is not None else (bl.T0, bl.T0)
    assert store.gate(bl.T0, day, policy) is None  # type: ignore[attr-defined]
    claimed = store.claim(HOLDER, generation, bl.T0, policy)  # type: ignore[attr-defined]
    assert claimed
    assert store.finish(HOLDER, generation, bl.T0,  # type: ignore[attr-defined]
                        [e.id for e in claimed], answer)
    assert store.release(HOLDER, generation, bl.T0)  # type: ignore[attr-defined]
    return len(claimed)


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
    if done != (total, total, total):
        raise SystemExit(f"events done (governed, free) and usage rows: {done}, expected "
                         f"{total} each")
    bl.report([bl.rate_row("run cycle with usage recorded and budgets checked vs none",
                     bl.median(rates["s"]), bl.median(rates["b"]), 1 / 1.05,
                     note=f"median of {rounds} slices of {per_slice} one-event cycles; "
                     "the budget never reached")], args)


if __name__ == "__main__":
    main()
