"""The pool figure, on either backend: `run --watch --all-users` processes sharing inboxes.

Inboxes each hold a few pending events, ``max_batch = 1`` (in the home's
config.toml), and a handler that sleeps 20 ms per batch; the figure is the
events per second handled by ``POOL`` processes against one, from the first
batch to the last (the files' times). Every batch is kept in a file of its
own, so an event handled twice, or never, counts as an error. The scripts
differ only in where the inboxes are: ``fill`` puts a fresh set of them in
reach of a new home for each side of each round.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from benchlib import Row, interleaved, median, progress, rate_row, stop, wait

AGENTBOX = [sys.executable, "-m", "agentbox"]
POOL = 4
PER_INBOX = 2  # pending events in each inbox
# The handler keeps each batch (one line of JSON) in a file of its own, with the
# shell's built-ins, then works 20 ms: two programs started per batch, sh and sleep.
POOL_HANDLER = ('IFS= read -r batch\n'
                'printf "%s\\n" "$batch" > "$1/$AGENTBOX_USER.$AGENTBOX_GENERATION.$$"\n'
                'sleep 0.02\n')

#: Given a fresh home (its config.toml written), make the inboxes reachable from it;
#: yields the environment the pool processes need beyond AGENTBOX_HOME.
Fill = Callable[[Path], AbstractContextManager[dict[str, str]]]


def users(inboxes: int) -> list[str]:
    return [f"user{n:04d}" for n in range(inboxes)]


def items() -> list[tuple[str, str, str]]:
    """The pending events of each inbox: (source, source_id, payload)."""
    return [("bench", f"e{k}", "{}") for k in range(PER_INBOX)]


def pool_rates(root: Path, env: dict[str, str], inboxes: int, rounds: int,
               fill: Fill) -> tuple[dict[str, list[float]], int]:
    """Events per second of one process ("one") and of ``POOL`` ("pool"), ``rounds``
    interleaved rounds each, every run on inboxes of its own; and how many events were
    handled twice or never in all of them."""
    script = root / "pool.sh"
    script.write_text(POOL_HANDLER)
    expected = Counter((user, source_id) for user in users(inboxes)
                       for _, source_id, _ in items())
    errors, serial = [0], [0]

    def measure(processes: int) -> float:
        serial[0] += 1
        home = root / f"pool{serial[0]}"
        home.mkdir()
        (home / "config.toml").write_text("max_batch = 1\n")
        with fill(home) as extra:
            rate, wrong = _run([*AGENTBOX, "run", "--watch", "--all-users", "--", "/bin/sh",
                                str(script)], {**env, "AGENTBOX_HOME": str(home), **extra},
                               home / "batches", processes, expected)
        shutil.rmtree(home)
        errors[0] += wrong
        return rate

    progress(f"pool: {rounds} round(s) of {inboxes} inboxes x {PER_INBOX} events, "
             f"1 process and {POOL}")
    rates = interleaved(rounds, {"one": lambda: measure(1), "pool": lambda: measure(POOL)})
    return rates, errors[0]


def _run(argv: list[str], env: dict[str, str], batches: Path, processes: int,
         expected: Counter[tuple[str, str]]) -> tuple[float, int]:
    """Start the processes, wait for every batch, stop them; the rate and the errors."""
    batches.mkdir()
    procs = [subprocess.Popen([*argv, str(batches)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for _ in range(processes)]
    total = sum(expected.values())

    def finished() -> bool:
        for proc in procs:
            if proc.poll() is not None:
                _, err = proc.communicate()
                raise SystemExit(f"a pool process ended ({proc.returncode}): "
                                 f"{err.decode()[-500:]}")
        return len(os.listdir(batches)) >= total

    wait(finished, "every batch", 600, every=0.1)
    time.sleep(0.5)  # the last finishes land, and any batch handled twice
    for proc in procs:
        stop(proc)
    files = list(batches.iterdir())
    handled: Counter[tuple[str, str]] = Counter()
    for file in files:
        batch = json.loads(file.read_text())
        handled.update((batch["user"], e["source_id"]) for e in batch["events"])
    errors = sum(((handled - expected) + (expected - handled)).values())
    times = sorted(f.stat().st_mtime for f in files)
    return (len(times) - 1) / (times[-1] - times[0]), errors


def pool_row(what: str, inboxes: int, rounds: int, rates: dict[str, list[float]],
             errors: int, note: str = "") -> Row:
    """The figure: the pool's median rate against one process's."""
    return rate_row(f"{what}: {POOL} run --watch --all-users vs 1, {inboxes} inboxes",
                    median(rates["pool"]), median(rates["one"]), 2.5,
                    note=f"max_batch 1, a 20 ms handler; median of {rounds} round(s); "
                         f"events handled twice or never must be 0{note}",
                    errors=errors)
