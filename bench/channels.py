"""Dispatch over ten channels against one: the same messages, each claimed and settled.

One step queues a message (as a finished run would, in one locked transaction)
and dispatches it: the claim, the sender's word settled. In the subject inbox
the messages take turns over ten channels, each with its own gap, keys and
last send to look up; in the baseline inbox they all go on `default`. The
clock moves on by the gap each step, so every claim sends; the ratio is what
keeping channels apart costs per message.
"""

from __future__ import annotations

import benchlib as bl

GAP = 1
CHANNELS = tuple(f"ch{n}" for n in range(10))


def step(store: object, n: int, channels: tuple[str, ...]) -> None:
    from agentbox.ledger.outbox import queue_in
    from agentbox.rules.answer import Message
    from agentbox.rules.outbox import Dispatch

    now = bl.T0 + n * GAP
    channel = channels[n % len(channels)]
    with store._locked() as (tx, _):  # type: ignore[attr-defined]
        queue_in(store.engine, tx, now, None,  # type: ignore[attr-defined]
                 [Message(f"message {n}", channel=channel)])
    claimed = store.claim_dispatch(now, "at-least-once", GAP, 60,  # type: ignore[attr-defined]
                                   channel=channel)
    assert isinstance(claimed, Dispatch), claimed
    assert store.settle_dispatch(claimed.key, "sent", now,  # type: ignore[attr-defined]
                                 attempt=claimed.tries)


def main() -> None:
    args = bl.options(__doc__.splitlines()[0])
    per_slice, rounds = (5, 6) if args.quick else (20, 40)
    from agentbox.location import open_store

    with bl.workdir(args, "channels") as root:
        bl.warn_if_memory(root)
        many, one = (open_store(bl.make_inbox(root / f"{name}.sqlite3"), "")
                     for name in ("ten", "one"))
        bl.progress(f"dispatch: {rounds} slices of {per_slice} messages each way")
        rates = bl.interleaved(rounds, {
            "s": bl.slices(per_slice, lambda n: step(many, n, CHANNELS)),
            "b": bl.slices(per_slice, lambda n: step(one, n, ("default",)))})
        sent = (many.status().outbox["sent"], one.status().outbox["sent"])
        many.close()
        one.close()
    if sent != (per_slice * rounds,) * 2:
        raise SystemExit(f"messages sent (ten channels, one): {sent}")
    bl.report([bl.rate_row("dispatch over 10 channels vs 1, per message", bl.median(rates["s"]),
                     bl.median(rates["b"]), 1 / 1.3, unit="msg/s",
                     note=f"median of {rounds} slices of {per_slice} queue+claim+settle "
                     "steps")], args)


if __name__ == "__main__":
    main()
