"""Durable runs: what a journaled step and the agent's state cost.

- `agentbox step KEY -- true`, a new KEY each time, as a process inside a run
  (the inbox's lease held, AGENTBOX_RUN set), against running `true` bare:
  the step's overhead is the difference, set beside the start-up of an
  `agentbox ingest` process, measured in the same rounds. A memo hit (a done
  KEY: CMD does not run) is set beside the same start-up.
- `batch.step` in Python, per call, through the library the handler uses: a
  miss (a new KEY: fence and started, the work, done: two transactions, the
  second durable)
  and a hit (one transaction that finds it done), on SQLite and, where a
  server is up, PostgreSQL; the baseline is one durable `Store.ingest`.
- A finish whose answer carries a 100 KiB state against one with none: the
  state is a new version written in the same fenced transaction.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.location import open_store
from agentbox.rules.answer import Answer
from agentbox.rules.policy import Policy
from agentbox.rules.state import Change
from agentbox.rules.steps import Outcome
from agentbox.steprun import RunRef, journaled, run_env

from benchlib import (
    T0,
    TIMES,
    Homes,
    console_script,
    interleaved,
    median,
    options,
    percentile,
    progress,
    report,
    run_program,
    time_row,
    timed,
    workdir,
)

HOLDER = "bench:1:cafe"
TTL = 10**6
PAYLOAD = '{"action": "opened", "number": 1347}'
_POLICY = Policy(lease_ttl=TTL)
BIG_STATE = {"notes": ["x" * 1000 for _ in range(100)], "summary": "y" * 2000}  # ~100 KiB


def _done(attempt: Any) -> Outcome:
    return Outcome("done", 0, b"ok\n", None)


def process_rows(root: Path, rounds: int) -> list[Any]:
    """`agentbox step` as a process: a miss, a hit, the bare command, an ingest."""
    agentbox = console_script()
    homes = Homes(root)
    env = homes.agentbox()
    inbox = Path(env["AGENTBOX_HOME"]) / "inboxes" / "bench.sqlite3"
    store = open_store(inbox, "bench")
    generation = store.acquire(HOLDER, T0, TTL)
    assert generation is not None
    run = {**env, "AGENTBOX_NOW": str(T0),
           "AGENTBOX_RUN": run_env(str(inbox), "bench", HOLDER, generation)}
    done = journaled(store, RunRef(str(inbox), "bench", HOLDER, generation), "done-key",
                     "at-least-once", _done, lambda: T0)
    assert done.action == "ran"
    store.close()
    true = ["/bin/true"] if os.path.exists("/bin/true") else ["true"]
    serial = iter(range(10**9))

    def side(argv: Callable[[], list[str]], environ: dict[str, str]) -> Callable[[], float]:
        return lambda: run_program(argv(), environ)[0]

    sides = {
        "miss": side(lambda: [str(agentbox), "step", f"k{next(serial)}", "--", *true], run),
        "hit": side(lambda: [str(agentbox), "step", "done-key", "--", *true], run),
        "bare": side(lambda: true, env),
        "ingest": side(lambda: [str(agentbox), "ingest", "github", f"d{next(serial)}",
                                "--payload", PAYLOAD], env),
    }
    progress(f"step as a process: {rounds} rounds of {len(sides)} process starts")
    interleaved(2, sides)
    times = interleaved(rounds, sides)
    miss, hit, bare, ingest = (median(times[k]) for k in ("miss", "hit", "bare", "ingest"))
    return [
        time_row("agentbox step overhead (new KEY, minus the bare command) vs ingest "
                 "start-up", miss - bare, ingest, 1.2,
                 note=f"median of {rounds}; step {miss * 1000:.1f} ms, bare `true` "
                 f"{bare * 1000:.1f} ms; fence + started, then done: two transactions, one "
                 "of them durable, as ingest's one"),
        time_row("agentbox step memo hit (a done KEY) vs ingest start-up", hit, ingest, 1.0,
                 note=f"median of {rounds}; one transaction that finds the KEY done, CMD "
                 "not run"),
    ]


def library_rows(what: str, url: str, calls: int, limits: tuple[float, float] | None,
                 user: str = "bench") -> list[Any]:
    """`batch.step` per call through the library: miss, hit, against one ingest."""
    store = open_store(url, user)
    generation = store.acquire(HOLDER, T0, TTL)
    assert generation is not None
    run = RunRef(url, user, HOLDER, generation)
    journaled(store, run, "hit", "at-least-once", _done, lambda: T0)
    serial = iter(range(10**9))
    sides = {
        "miss": lambda: timed(lambda: journaled(store, run, f"m{next(serial)}",
                                                "at-least-once", _done, lambda: T0)),
        "hit": lambda: timed(lambda: journaled(store, run, "hit", "at-least-once", _done,
                                               lambda: T0)),
        "ingest": lambda: timed(lambda: store.ingest("github", f"d{next(serial)}", PAYLOAD,
                                                     T0)),
    }
    progress(f"batch.step on {what}: {calls} calls of each")
    interleaved(10, sides)
    times = interleaved(calls, sides)
    store.close()
    miss, hit, ingest = (percentile(times[k], 0.5) for k in ("miss", "hit", "ingest"))
    miss_limit, hit_limit = limits if limits else (None, None)
    return [
        time_row(f"batch.step memo miss per call, {what}, vs one ingest", miss, ingest,
                 1.5 if limits else None, limit_s=miss_limit,
                 note=f"p50 of {calls}; fence + started (durable only at-most-once), then "
                 "done (durable): one fsync, as ingest's one"),
        time_row(f"batch.step memo hit per call, {what}, vs one ingest", hit, ingest,
                 1.0 if limits else None, limit_s=hit_limit,
                 note=f"p50 of {calls}; one transaction under the inbox's lock that finds "
                 "the KEY done"),
    ]


def finish_rows(root: Path, rounds: int) -> list[Any]:
    """A finish carrying a 100 KiB state against one carrying none, on SQLite."""
    big = json.dumps(BIG_STATE, separators=(",", ":"))
    stores = {name: open_store(root / f"{name}.sqlite3", "bench") for name in ("state", "none")}
    answers = {"state": Answer(state=Change(replace=BIG_STATE)), "none": Answer()}
    serial = iter(range(10**9))

    def finish(name: str) -> float:
        s = stores[name]
        s.ingest("chat", f"m{next(serial)}", PAYLOAD, T0)
        generation = s.acquire(HOLDER, T0, TTL)
        assert generation is not None
        claimed = s.claim(HOLDER, generation, T0, _POLICY)
        assert claimed
        took = timed(lambda: s.finish(HOLDER, generation, T0, [e.id for e in claimed],
                                      answers[name], _POLICY))
        return took

    sides = {name: (lambda name=name: finish(name)) for name in stores}
    progress(f"finish with and without state: {rounds} rounds")
    interleaved(3, sides)
    times = interleaved(rounds, sides)
    for s in stores.values():
        s.close()
    with_state, without = median(times["state"]), median(times["none"])
    return [time_row("finish with a 100 KiB state vs none, SQLite", with_state, without, 1.5,
                     note=f"median of {rounds}; {len(big) // 1024} KiB of canonical JSON "
                     "written as a new version, the oldest beyond keep_state_versions "
                     f"deleted ({with_state / without:.2f}{TIMES})")]


def main() -> None:
    args = options(__doc__.splitlines()[0])
    rounds = 3 if args.quick else 30
    calls = 20 if args.quick else 400
    rows: list[Any] = []
    with workdir(args, "steps") as root:
        rows += process_rows(root / "process", rounds)
        (root / "lib").mkdir()
        rows += library_rows("SQLite", str(root / "lib" / "bench.sqlite3"), calls,
                             (0.002, 0.0005))
        rows += finish_rows(root, rounds * 2)
    url = _postgres(args)
    if url is not None:
        import pglib

        with pglib.schema(url, "steps") as fresh:
            rows += library_rows("PostgreSQL", fresh, calls, None)
    report(rows, args)


def _postgres(args: Any) -> str | None:
    """The PostgreSQL server's URL, or None (said on stderr) where there is none to use:
    the SQLite rows stand on their own."""
    import pglib

    url = args.pg or pglib.DEFAULT_URL
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # no driver, no server: the PostgreSQL rows are left out
        if os.environ.get("AGENTBOX_REQUIRE_PG") == "1":
            raise SystemExit(f"AGENTBOX_REQUIRE_PG=1 but no PostgreSQL server: {exc}") from None
        progress(f"PostgreSQL rows left out: {type(exc).__name__}")
        return None
    return url


if __name__ == "__main__":
    sys.exit(main())
