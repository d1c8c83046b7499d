"""Always on: how soon a watcher acts, what it costs idle, and how a pool of them scales.

- Latency, `run --watch`: from `Store.ingest` returning (one durable ingest,
  as `agentbox ingest` does it) to the handler starting (a shell script whose
  first act is to note the time). Baseline: the best a watcher-less setup can
  do, `agentbox run` started the moment the ingest returns.
- Latency, `dispatch --watch`: from the finish that queues an urgent message
  returning to the sender starting. Baseline: `agentbox dispatch` started
  the moment the finish returns.
- Idle CPU: a `run --watch` and a `dispatch --watch` with nothing to do,
  their CPU time over a while, against a bare process polling
  `PRAGMA data_version` every 50 ms (the simplest watcher there is).
- Pool: inboxes each holding a few events, `max_batch = 1`, a handler that
  sleeps 20 ms per batch; events per second handled by 4 `run --watch
  --all-users` processes against 1. Every batch is kept, to check that no
  event was handled twice.

Agentbox runs as `python -m agentbox` with this interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from benchlib import (
    BENCH,
    Row,
    clean_env,
    copy_inbox,
    cpu_seconds,
    make_inbox,
    options,
    percentile,
    progress,
    report,
    stop,
    time_row,
    wait,
    warn_if_memory,
    workdir,
)
from poollib import AGENTBOX, items, pool_rates, pool_row, users

P50_LIMIT, P99_LIMIT = 0.100, 0.500  # seconds
IDLE_LIMIT = 1.0  # % of one core
# The handler and the sender note when they start, then read their input.
STAMP = 'date +%s.%N >> "$1"\ncat > /dev/null\n'


class Home:
    """An AGENTBOX_HOME with user bench's empty inbox, and the store to write to it."""

    def __init__(self, root: Path, name: str, template: Path, env: dict[str, str]) -> None:
        from agentbox.location import open_store

        self.root = root / name
        self.log = self.root / "stamps"
        copy_inbox(template, self.root / "inboxes" / "bench.sqlite3")
        self.env = {**env, "AGENTBOX_HOME": str(self.root), "AGENTBOX_USER": "bench"}
        self.store = open_store(self.root / "inboxes" / "bench.sqlite3", "")
        self.serial = 0

    def stamps(self) -> list[float]:
        return [float(t) for t in self.log.read_text().split()] if self.log.exists() else []

    def start(self, *argv: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*AGENTBOX, *argv], env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)

    def ingest(self) -> int:
        self.serial += 1
        return self.store.ingest("bench", f"e{self.serial}", "{}", int(time.time())).id

    def queue_urgent(self) -> None:
        """One event handled in-process whose answer is an urgent message."""
        from agentbox.rules.answer import Answer, Message
        from agentbox.rules.policy import Policy

        now = int(time.time())
        event_id = self.ingest()
        holder = f"bench-{self.serial}"
        generation = self.store.acquire(holder, now, 120)
        assert generation is not None
        self.store.claim(holder, generation, now, Policy())
        assert self.store.finish(holder, generation, now, [event_id],
                                 Answer(messages=(Message(f"m{self.serial}", urgent=True),)))
        self.store.release(holder, generation, now)

    def settled(self, what: str, count: int) -> None:
        """Wait until ``count`` events are done, or messages sent."""
        table, state = ("events", "done") if what == "events" else ("outbox", "sent")
        wait(lambda: getattr(self.store.status(), table)[state] >= count, f"{count} {state}")


def stamped(home: Home, count: int) -> float:
    """Wait for the ``count``-th start stamp; its time."""
    wait(lambda: len(home.stamps()) >= count, f"start {count}")
    return home.stamps()[count - 1]


def started(proc: subprocess.Popen[bytes], says: str) -> subprocess.Popen[bytes]:
    """Wait until a watcher says it is watching (its first line on stderr)."""
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    if says not in line:
        raise SystemExit(f"a watcher did not start: {line}{proc.stderr.read().decode()}")
    return proc


def latency(root: Path, template: Path, env: dict[str, str], watched: int, once: int,
            quiet: float) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Ingest→handler and urgent→sender delays, watching and one-shot; idle CPU shares."""
    script = root / "stamp.sh"
    script.write_text(STAMP)
    stamp = ["/bin/sh", str(script)]
    homes = {name: Home(root, name, template, env)
             for name in ("run-watch", "run-once", "dispatch-watch", "dispatch-once")}
    run_watch = started(homes["run-watch"].start("run", "--watch", "--", *stamp,
                                                 str(homes["run-watch"].log)),
                        "watching with the lease")
    dispatch_watch = started(homes["dispatch-watch"].start(
        "dispatch", "--watch", "--gap", "1h", "--", *stamp, str(homes["dispatch-watch"].log)),
        "watching the outbox")
    delays: dict[str, list[float]] = {name: [] for name in homes}

    def by_watcher(name: str, queue: Callable[[Home], object], settled: str) -> float:
        """Queue work for a watcher; the delay until it started the command."""
        home = homes[name]
        queue(home)
        began = time.time()
        delay = stamped(home, home.serial) - began
        home.settled(settled, home.serial)
        return delay

    def by_command(name: str, queue: Callable[[Home], object], *argv: str) -> float:
        """Queue work, then start a one-shot command; the delay until it started the command."""
        home = homes[name]
        queue(home)
        began = time.time()
        proc = home.start(*argv, "--", *stamp, str(home.log))
        delay = stamped(home, home.serial) - began
        proc.communicate(timeout=60)
        return delay

    progress(f"latency: {watched} ingests and urgent messages watched, {once} one-shot")
    for n in range(watched):
        delays["run-watch"].append(by_watcher("run-watch", Home.ingest, "events"))
        delays["dispatch-watch"].append(by_watcher("dispatch-watch", Home.queue_urgent, "outbox"))
        if n % (watched // once) == 0:
            delays["run-once"].append(by_command("run-once", Home.ingest, "run"))
            delays["dispatch-once"].append(by_command("dispatch-once", Home.queue_urgent,
                                                      "dispatch", "--gap", "1h"))
    idle = idle_cpu(homes["run-watch"], {"run": run_watch, "dispatch": dispatch_watch}, quiet)
    stop(run_watch)
    stop(dispatch_watch)
    for home in homes.values():
        home.store.close()
    return delays, idle


def idle_cpu(home: Home, watchers: dict[str, subprocess.Popen[bytes]],
             seconds: float) -> dict[str, float]:
    """The share of a core each watcher, and a bare 50 ms poller, use over a quiet spell."""
    poller = subprocess.Popen(
        [sys.executable, str(BENCH / "wakeup.py"), "--watch", "version",
         str(home.root / "inboxes" / "bench.sqlite3")], stdout=subprocess.DEVNULL, env=home.env)
    procs = {**{name: p.pid for name, p in watchers.items()}, "poll": poller.pid}
    time.sleep(1.0)
    progress(f"idle CPU: {seconds:.0f} s with nothing to do")
    before = {name: cpu_seconds(pid) for name, pid in procs.items()}
    time.sleep(seconds)
    used = {name: (cpu_seconds(pid) - before[name]) / seconds * 100
            for name, pid in procs.items()}
    poller.terminate()
    poller.wait(timeout=60)
    return used


def pool_inboxes(root: Path, template: Path, inboxes: int) -> Path:
    """A folder of ``inboxes`` users' inboxes holding the pool's pending events."""
    from agentbox.location import open_store

    folder = root / "pool-inboxes"
    for user in users(inboxes):
        path = copy_inbox(template, folder / f"{user}.sqlite3")
        with open_store(path, "", durable=False) as store:
            store.ingest_many(items(), int(time.time()))
    return folder


@contextmanager
def copied(folder: Path, home: Path) -> Iterator[dict[str, str]]:
    """The pool's inboxes for one run: a copy of ``folder`` in the home's data folder."""
    shutil.copytree(folder, home / "inboxes")
    yield {}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    watched, once, quiet, inboxes, rounds = ((20, 5, 3.0, 24, 1) if args.quick
                                             else (200, 40, 10.0, 200, 2))
    with workdir(args, "watch") as root:
        warn_if_memory(root)
        env = {**clean_env(root), "PYTHONPATH": os.pathsep.join(sys.path)}
        template = make_inbox(root / "template.sqlite3")
        delays, idle = latency(root, template, env, watched, once, quiet)

        folder = pool_inboxes(root, template, inboxes)
        rates, errors = pool_rates(root, env, inboxes, rounds, partial(copied, folder))

    def p(name: str, share: float) -> float:
        return percentile(delays[name], share)

    run_note = (f"{watched} ingests watched, {once} one-shot runs; p50/p99 watched "
                f"{p('run-watch', .5) * 1000:.1f}/{p('run-watch', .99) * 1000:.1f} ms, "
                f"one-shot {p('run-once', .5) * 1000:.0f}/{p('run-once', .99) * 1000:.0f} ms")
    send_note = (f"{watched} urgent messages watched, {once} one-shot dispatches; p50/p99 "
                 f"watched {p('dispatch-watch', .5) * 1000:.1f}/"
                 f"{p('dispatch-watch', .99) * 1000:.1f} ms, one-shot "
                 f"{p('dispatch-once', .5) * 1000:.0f}/{p('dispatch-once', .99) * 1000:.0f} ms")
    idle_note = (f"share of one core while idle: run --watch {idle['run']:.3f} %, dispatch "
                 f"--watch {idle['dispatch']:.3f} %, 50 ms poller {idle['poll']:.3f} %")
    report([
        time_row("latency p50: ingest → handler, run --watch vs agentbox run started then",
                 p("run-watch", .5), p("run-once", .5), 0.5, run_note, limit_s=P50_LIMIT),
        time_row("latency p99: ingest → handler, run --watch vs agentbox run started then",
                 p("run-watch", .99), p("run-once", .99), 1.0, run_note, limit_s=P99_LIMIT),
        time_row("latency p50: urgent message → sender, dispatch --watch vs one-shot",
                 p("dispatch-watch", .5), p("dispatch-once", .5), 0.5, send_note,
                 limit_s=P50_LIMIT),
        time_row("latency p99: urgent message → sender, dispatch --watch vs one-shot",
                 p("dispatch-watch", .99), p("dispatch-once", .99), 1.0, send_note,
                 limit_s=P99_LIMIT),
        Row("idle CPU: run --watch vs a 50 ms data_version poller", idle["run"], idle["poll"],
            "% CPU", 1.0, False, idle_note, limit=IDLE_LIMIT),
        Row("idle CPU: dispatch --watch vs a 50 ms data_version poller", idle["dispatch"],
            idle["poll"], "% CPU", 1.0, False, idle_note, limit=IDLE_LIMIT),
        pool_row("pool", inboxes, rounds, rates, errors),
    ], args)


if __name__ == "__main__":
    main()
