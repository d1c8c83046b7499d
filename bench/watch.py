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

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchlib import (
    BENCH,
    Row,
    clean_env,
    copy_inbox,
    cpu_seconds,
    interleaved,
    make_inbox,
    median,
    options,
    percentile,
    progress,
    rate_row,
    report,
    time_row,
    warn_if_memory,
    workdir,
)

AGENTBOX = [sys.executable, "-m", "agentbox"]
P50_LIMIT, P99_LIMIT = 0.100, 0.500  # seconds
IDLE_LIMIT = 1.0  # % of one core
POOL = 4
# The handler and the sender note when they start, then read their input.
STAMP = 'date +%s.%N >> "$1"\ncat > /dev/null\n'
# The pool's handler keeps each batch (one line of JSON) in a file of its own, with the
# shell's built-ins, then works 20 ms: two programs started per batch, sh and sleep.
POOL_HANDLER = ('IFS= read -r batch\n'
                'printf "%s\\n" "$batch" > "$1/$AGENTBOX_USER.$AGENTBOX_GENERATION.$$"\n'
                'sleep 0.02\n')


class Home:
    """An AGENTBOX_HOME with user bench's empty inbox, and the store to write to it."""

    def __init__(self, root: Path, name: str, template: Path, env: dict[str, str]) -> None:
        from agentbox.backends.sqlite.store import SqliteStore

        self.root = root / name
        self.log = self.root / "stamps"
        copy_inbox(template, self.root / "inboxes" / "bench.sqlite3")
        self.env = {**env, "AGENTBOX_HOME": str(self.root), "AGENTBOX_USER": "bench"}
        self.store = SqliteStore(self.root / "inboxes" / "bench.sqlite3")
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


def wait(condition: Callable[[], object], what: str, timeout: float = 60.0,
         every: float = 0.005) -> None:
    """Poll ``condition``; the delays measured are stamped by the programs themselves,
    so the polling only decides how soon the next measurement starts."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


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


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"a watcher exited {proc.returncode}: {err.decode()[-500:]}")


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


def pool_template(root: Path, template: Path, inboxes: int, events: int) -> Path:
    """A data folder of ``inboxes`` inboxes holding ``events`` pending events each."""
    from agentbox.backends.sqlite.store import SqliteStore

    folder = root / "pool-template"
    for n in range(inboxes):
        path = copy_inbox(template, folder / "inboxes" / f"user{n:04d}.sqlite3")
        with SqliteStore(path, synchronous="OFF") as store:
            store.ingest_many([("bench", f"e{k}", "{}") for k in range(events)],
                              int(time.time()))
    (folder / "config.toml").write_text("max_batch = 1\n")
    return folder


def pool_rate(root: Path, template: Path, env: dict[str, str], processes: int,
              expected: Counter[tuple[str, int]], serial: list[int]) -> tuple[float, int]:
    """Events per second handled by ``processes`` pool processes; and how many events
    were handled twice or not at all."""
    serial[0] += 1
    home = root / f"pool{serial[0]}"
    shutil.copytree(template, home)
    batches = home / "batches"
    batches.mkdir()
    script = root / "pool.sh"
    script.write_text(POOL_HANDLER)
    run_env = {**env, "AGENTBOX_HOME": str(home)}
    procs = [subprocess.Popen([*AGENTBOX, "run", "--watch", "--all-users", "--", "/bin/sh",
                               str(script), str(batches)], env=run_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(processes)]
    total = sum(expected.values())
    wait(lambda: len(os.listdir(batches)) >= total, "every batch", 600, every=0.1)
    time.sleep(0.5)  # the last finishes land
    for proc in procs:
        stop(proc)
    files = list(batches.iterdir())
    handled: Counter[tuple[str, int]] = Counter()
    for file in files:
        batch = json.loads(file.read_text())
        handled.update((batch["user"], e["id"]) for e in batch["events"])
    errors = sum(((handled - expected) + (expected - handled)).values())
    times = sorted(f.stat().st_mtime for f in files)
    shutil.rmtree(home)
    return (len(times) - 1) / (times[-1] - times[0]), errors


def main() -> None:
    args = options(__doc__.splitlines()[0])
    watched, once, quiet, inboxes, rounds = ((20, 5, 3.0, 24, 1) if args.quick
                                             else (200, 40, 10.0, 200, 2))
    per_inbox = 2
    with workdir(args, "watch") as root:
        warn_if_memory(root)
        env = {**clean_env(root), "PYTHONPATH": os.pathsep.join(sys.path)}
        template = make_inbox(root / "template.sqlite3")
        delays, idle = latency(root, template, env, watched, once, quiet)

        folder = pool_template(root, template, inboxes, per_inbox)
        expected = Counter((f"user{n:04d}", k) for n in range(inboxes)
                           for k in range(1, per_inbox + 1))
        progress(f"pool: {rounds} round(s) of {inboxes} inboxes x {per_inbox} events, "
                 f"1 process and {POOL}")
        errors = [0]
        serial = [0]

        def measure(processes: int) -> float:
            rate, wrong = pool_rate(root, folder, env, processes, expected, serial)
            errors[0] += wrong
            return rate

        rates = interleaved(rounds, {"one": lambda: measure(1), "pool": lambda: measure(POOL)})

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
        rate_row(f"pool: {POOL} run --watch --all-users vs 1, {inboxes} inboxes",
                 median(rates["pool"]), median(rates["one"]), 2.5,
                 note=f"max_batch 1, a 20 ms handler; median of {rounds} round(s); events "
                      "handled twice or never must be 0", errors=errors[0]),
    ], args)


if __name__ == "__main__":
    main()
