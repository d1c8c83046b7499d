"""A year of one inbox: its file after a year of daily pruning against after 30 days.

The clock is pinned and moves a day at a time. Every day, events arrive in
ten bursts (100 a day; 1,000 with --full, which takes about ten minutes),
and at the end of the day one run claims them all, answers each with a
reply and finishes them; one dispatch sends the replies, merged; then the
run's daily prune (upkeep.auto_prune, as `agentbox run` calls it, pauses
left out). The subject is the file at the end of the year, the baseline the
same file after its first 30 days: a pruned inbox should stop growing once
its oldest events pass keep_done (30 days) and its remembered keys the
dedupe window (90 days). The same year without pruning, and on a file made
before auto_vacuum (freed pages reused, never handed back), are reported
beside it. Sizes are of the main file after a full checkpoint.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from benchlib import (
    Row,
    options,
    progress,
    report,
    warn_if_memory,
    workdir,
)

DAY = 86400
T0 = 1_700_006_400  # midnight UTC
BURSTS = 10
HOLDER = "bench:1:year"
CHECKPOINTS = (30, 60, 90, 120, 180, 270, 365)
WORDS = ["the", "build", "is", "red", "again", "please", "look", "at", "failing", "test",
         "before", "release", "can", "you", "summarise", "what", "changed", "since",
         "yesterday", "and", "who", "on", "call", "tonight"]


def message(rng: random.Random, day: int, n: int) -> str:
    """A chat-like webhook payload of about 600 bytes, canonical JSON."""
    text = " ".join(rng.choice(WORDS) for _ in range(70))
    return json.dumps({"channel": f"C{rng.randrange(10**8):08d}", "day": day, "n": n,
                       "text": text, "ts": f"{T0 + day * DAY}.{n:06d}",
                       "user": f"U{rng.randrange(10**8):08d}"},
                      sort_keys=True, separators=(",", ":"))


def year(path: Path, days: int, per_day: int, prune: bool, old_file: bool) -> dict[int, int]:
    """Run the year; the file's size (bytes) after each checkpoint day."""
    from agentbox.location import open_store
    from agentbox.rules.answer import Answer, Message
    from agentbox.rules.outbox import Dispatch
    from agentbox.rules.policy import Policy
    from agentbox.upkeep import auto_prune

    rng = random.Random(7)
    policy = Policy(max_batch=100, auto_prune=prune)
    store = open_store(path, "", durable=False)  # sizes, not speed: durability costs time
    if old_file:
        store.engine.conn.execute("PRAGMA auto_vacuum = NONE")
        store.engine.conn.execute("VACUUM")
    sizes: dict[int, int] = {}
    for day in range(days):
        start = T0 + day * DAY
        for burst in range(BURSTS):
            first, last = burst * per_day // BURSTS, (burst + 1) * per_day // BURSTS
            store.ingest_many([("chat", f"{day}-{n}", message(rng, day, n))
                               for n in range(first, last)], start + burst * 8000)
        now = start + DAY - 600
        generation = store.acquire(HOLDER, now, 600)
        assert generation is not None
        while batch := store.claim(HOLDER, generation, now, policy):
            replies = tuple(Message(f"re {e.source_id}: noted, I will look into it and "
                                    "report back before the end of the day", False)
                            for e in batch)
            assert store.finish(HOLDER, generation, now, [e.id for e in batch],
                                Answer(messages=replies))
        assert store.release(HOLDER, generation, now)
        sent = store.claim_dispatch(now, "at-least-once", 3600, 60)
        assert isinstance(sent, Dispatch)
        assert store.settle_dispatch(sent.key, "sent", now, attempt=sent.tries)
        auto_prune(store, now, policy, sleep=lambda _: None)
        if day + 1 in CHECKPOINTS or day + 1 == days:
            store.engine.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            sizes[day + 1] = path.stat().st_size
            progress(f"  {path.stem}: day {day + 1}: {sizes[day + 1] / 2**20:.1f} MiB")
    store.close()
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--full", action="store_true")
    known, rest = parser.parse_known_args()
    args = options(__doc__.splitlines()[0] + " (--full: 1,000 events a day)", rest)
    days, per_day = (120, 50) if args.quick else (365, 1000 if known.full else 100)
    with workdir(args, "year") as root:
        warn_if_memory(root)
        runs = {}
        for name, prune, old in (("pruned", True, False), ("unpruned", False, False),
                                 ("old-file", True, True)):
            progress(f"year: {days} days of {per_day:,} events, {name}")
            runs[name] = year(root / f"{name}.sqlite3", days, per_day, prune, old)

    def ratio(name: str) -> str:
        sizes = runs[name]
        return f"{sizes[days] / 2**20:.1f} MiB, {sizes[days] / sizes[30]:.2f}x day 30"

    pruned = runs["pruned"]
    trail = ", ".join(f"day {d}: {s / 2**20:.1f}" for d, s in pruned.items())
    rows = [Row(f"year: {per_day:,} events a day, pruned daily, file after {days} days "
                "vs after 30", pruned[days] / 1024, pruned[30] / 1024, "KiB", 1.2, False,
                note=f"MiB by day ({trail}); without pruning: {ratio('unpruned')}; "
                f"pruned, on a file made before auto_vacuum: {ratio('old-file')}")]
    report(rows, args)


if __name__ == "__main__":
    main()
