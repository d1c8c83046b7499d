"""Prune under load: single ingests' p99 while `agentbox prune` deletes 1,000,000 done events.

The inbox is made by the engine and filled by plain SQL (as in scale.py):
done events with their claimed and finished history, all past keep_done,
and a few pending ones. `agentbox prune` then runs as a real process, while
this process stores one event at a time (Store.ingest: one durable
transaction each, a new key each time, 20 ms apart) and times each. The
subject is the p99 of those ingests; the baseline is the budget they must
meet, 250 ms. The note gives the p99 of the same ingests with no prune
running (measured first, in this run), the prune's duration and rate, and
the file before and after.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (
    HISTORY,
    T0,
    clean_env,
    filled_inbox,
    options,
    payload,
    progress,
    report,
    time_row,
    warn_if_memory,
    workdir,
)

BUDGET = 0.250  # seconds: no ingest may wait longer than this, 99 times in 100
GAP = 0.020     # seconds between two ingests
AGE = 40 * 86400  # every done event finished this long before the prune

_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
INSERT INTO events (id, source, source_id, payload, status, attempts, claim_gen,
                    created_at, updated_at)
SELECT i, 'github', 'delivery-' || i,
       '{"action":"opened","number":' || i || ',"repo":"octo/bench","text":"look"}',
       CASE WHEN i > :total - 10 THEN 'pending' ELSE 'done' END,
       CASE WHEN i > :total - 10 THEN 0 ELSE 1 END, 1, :then, :then
FROM n"""

_COUNTS = """
UPDATE state_counts SET n = (SELECT COUNT(*) FROM events WHERE status = state_counts.state)
WHERE tbl = 'events'"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    args = options(__doc__.splitlines()[0])
    total, idle_ingests = (50_000, 100) if args.quick else (1_000_000, 300)
    from agentbox.location import open_store

    with workdir(args, "prune-ingest") as root:
        warn_if_memory(root)
        progress(f"prune under load: building an inbox of {total:,} done events")
        db = filled_inbox(root / "inbox.sqlite3",
                          (_FILL, {"total": total, "then": T0 - AGE}), (HISTORY, {}),
                          (_COUNTS, {}))
        before = db.stat().st_size
        store = open_store(db, "")
        serial = iter(range(10**9))

        def ingest() -> float:
            n = next(serial)
            started = time.perf_counter()
            result = store.ingest("load", f"k-{n}", payload(n), T0)
            took = time.perf_counter() - started
            assert result.outcome == "stored", result
            time.sleep(GAP)
            return took

        progress(f"prune under load: {idle_ingests} ingests with no prune running")
        idle = [ingest() for _ in range(idle_ingests)]
        env = {**clean_env(root), "AGENTBOX_NOW": str(T0)}
        progress("prune under load: `agentbox prune` while ingesting")
        started = time.monotonic()
        pruner = subprocess.Popen([sys.executable, "-m", "agentbox", "--db", str(db), "prune",
                                   "--json"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        during = []
        while pruner.poll() is None:
            during.append(ingest())
        seconds = time.monotonic() - started
        out, err = pruner.communicate()
        if pruner.returncode != 0:
            raise SystemExit(f"agentbox prune failed ({pruner.returncode}): {err[-500:]}")
        pruned = json.loads(out)
        left = store.status().events
        store.close()
        after = Path(db).stat().st_size
    if pruned["events"] != total - 10 or left["done"] != 0:
        raise SystemExit(f"pruned {pruned['events']} events, {left['done']} done left")
    p99 = percentile(during, 0.99)
    report([time_row(
        f"prune of {total:,} done events: single-ingest p99 during it vs the 250 ms budget",
        p99, BUDGET, 1.0,
        note=f"{len(during)} ingests during the prune: p50 {percentile(during, 0.5) * 1000:.1f}"
        f" ms, max {max(during) * 1000:.0f} ms; with no prune running p50 "
        f"{percentile(idle, 0.5) * 1000:.1f} ms, p99 {percentile(idle, 0.99) * 1000:.1f} ms; "
        f"the prune took {seconds:.0f} s ({pruned['events'] / seconds:,.0f} events/s, "
        f"history included); file {before / 2**20:,.0f} MiB before, "
        f"{after / 2**20:,.0f} MiB after")], args)


if __name__ == "__main__":
    main()
