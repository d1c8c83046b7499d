"""Real processes racing on one inbox file: the lease and the claim hold across processes.

Each child is a separate Python process using the engine; they are released
together through a barrier of files, so their calls land at the same instant.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentbox.backends.sqlite.schema import SCHEMA_VERSION
from support.clock import T0, TTL
from support.sqlite import assert_counts_true, sqlite_store

CHILDREN = 5
PATIENCE = 120.0  # seconds; the machine may be busy with other test runs

CHILD = r"""
import json, sys, time
from pathlib import Path
from agentbox.rules.lease import new_holder_id
from agentbox.rules.policy import Policy
from agentbox.backends.sqlite.schema import SCHEMA_VERSION
from agentbox.location import open_store

def sqlite_store(path):
    return open_store(path, '')

mode, db, sync, me, rounds, t0, ttl = sys.argv[1:8]
sync, rounds, t0, ttl = Path(sync), int(rounds), int(t0), int(ttl)

def barrier(k):
    (sync / f"ready-{k}-{me}").touch()
    give_up = time.monotonic() + 120
    while not (sync / f"go-{k}").exists():
        if time.monotonic() > give_up:
            sys.exit("barrier timed out")
        time.sleep(0.0005)

holder = new_holder_id()
out = {"holder": holder}
if mode == "acquire":
    store, got = None, []
    for k in range(rounds):
        barrier(k)
        store = store or sqlite_store(db)  # the first round also races to create the file
        got.append(store.acquire(holder, t0 + k * (ttl + 1), ttl))
    out["generations"] = got
elif mode == "claim":
    store = sqlite_store(db)
    policy = Policy(max_batch=3)
    runs, finished = [], []
    barrier(0)
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        now = int(time.time())
        gen = store.acquire(holder, now, ttl)
        if gen is None:
            time.sleep(0.001)
            continue
        batch = store.claim(holder, gen, now, policy)
        ids = [e.id for e in batch or []]
        runs.append([gen, ids, [e.attempts for e in batch or []]])
        finished.append(store.finish(holder, gen, now, ids))
        store.release(holder, gen, now)
        if batch == []:
            break
    out["runs"], out["finished"] = runs, finished
elif mode == "ingest":
    store = sqlite_store(db)
    barrier(0)
    items = [("hook", f"d-{n}", '{"n":%d}' % n) for n in range(rounds)]
    out["outcomes"] = [r.outcome for r in store.ingest_many(items, t0)]
print(json.dumps(out))
"""


def race(tmp_path: Path, mode: str, db: Path, rounds: int, ttl: int = TTL) -> list[Any]:
    """Start the children, release them round by round, and collect what each reports."""
    sync = tmp_path / f"sync-{mode}"
    sync.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, mode, str(db), str(sync), str(n),
                               str(rounds), str(T0), str(ttl)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(CHILDREN)]
    try:
        barriers = rounds if mode == "acquire" else 1
        for k in range(barriers):
            give_up = time.monotonic() + PATIENCE
            while len(list(sync.glob(f"ready-{k}-*"))) < CHILDREN:
                assert time.monotonic() < give_up, f"children never reached barrier {k}"
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                time.sleep(0.01)
            (sync / f"go-{k}").touch()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=PATIENCE)
            assert p.returncode == 0, err
            reports.append(json.loads(out))
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_racing_acquirers_get_each_generation_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "fresh.sqlite3"  # does not exist yet: creating it is part of the race
    rounds = 6
    reports = race(tmp_path, "acquire", db, rounds)
    assert len({r["holder"] for r in reports}) == CHILDREN
    for k in range(rounds):
        got = Counter(r["generations"][k] for r in reports)
        assert got == Counter({k + 1: 1, None: CHILDREN - 1}), (k, got)
    with sqlite_store(db) as store:
        lease = store.lease()
        assert lease is not None and lease.generation == rounds
        winner = [r["holder"] for r in reports if r["generations"][-1] == rounds]
        assert [lease.holder] == winner
        # each migration applied once, however many processes raced to create the file
        assert store.engine.conn.execute("SELECT COUNT(*) FROM migrations").fetchone()[0] \
            == SCHEMA_VERSION


def test_racing_claimers_never_claim_the_same_row_twice(tmp_path: Path) -> None:
    db = tmp_path / "inbox.sqlite3"
    total = 40
    with sqlite_store(db) as store:
        store.ingest_many([("chat", f"m{n}", "{}") for n in range(total)], T0)
    reports = race(tmp_path, "claim", db, 1, ttl=600)
    claimed = [i for r in reports for _, ids, _ in r["runs"] for i in ids]
    assert sorted(claimed) == list(range(1, total + 1))  # each row exactly once
    assert all(all(r["finished"]) for r in reports)
    assert all(a == 1 for r in reports for _, _, attempts in r["runs"] for a in attempts)
    owners = Counter(gen for r in reports for gen, _, _ in r["runs"])
    generations = [gen for r in reports for gen, _, _ in r["runs"]]
    assert len(set(generations)) == len(generations), owners  # one run per generation
    with sqlite_store(db) as store:
        assert store.status().events == {"pending": 0, "running": 0, "done": total, "dead": 0}
        assert_counts_true(store)


def test_racing_ingesters_store_each_key_once(tmp_path: Path) -> None:
    db = tmp_path / "inbox.sqlite3"
    sqlite_store(db).close()
    keys = 50
    reports = race(tmp_path, "ingest", db, keys)
    for n in range(keys):
        got = Counter(r["outcomes"][n] for r in reports)
        assert got == Counter({"stored": 1, "duplicate": CHILDREN - 1}), (n, got)
    with sqlite_store(db) as store:
        assert store.status().events["pending"] == keys
        assert_counts_true(store)
