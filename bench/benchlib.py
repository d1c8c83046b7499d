"""Shared plumbing for the benchmark scripts: options, timing, baselines, report rows.

Every script measures a subject (agentbox) and a baseline (bare Python and
sqlite3 doing the same durable writes) in the same run, interleaved so that
load from other programs hits both alike, and reports medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PROGRAMS = BENCH / "programs"
TIMES = "\u00d7"  # the multiplication sign of ratios
T0 = 1_700_000_000  # the pinned clock of every engine call

# The event row every baseline and subject writes (the schema's trigger adds its
# 'stored' history row), and a history row for the other transitions.
INSERT_EVENT = """INSERT INTO events (source, source_id, payload, created_at, updated_at)
                  VALUES (?, ?, ?, ?, ?) ON CONFLICT (source, source_id) DO NOTHING
                  RETURNING id"""
INSERT_HISTORY = """INSERT INTO history (at, subject, subject_id, action, generation, detail)
                    VALUES (?, ?, ?, ?, ?, ?)"""

# The story of every event a filled inbox holds as finished: claimed, then finished.
HISTORY = """
INSERT INTO history (at, subject, subject_id, action, generation, detail)
SELECT e.updated_at, 'event', CAST(e.id AS TEXT), a.action, 1, NULL
FROM events AS e JOIN (SELECT 2 AS k, 'claimed' AS action UNION ALL
                       SELECT 3, 'finished') AS a
  ON e.status <> 'pending'
ORDER BY e.id, a.k"""


@dataclass(frozen=True)
class Row:
    """One line of the results table.

    ``higher_is_better`` says how to read the ratio (subject / baseline): a
    time is good when the ratio is at most ``target``, a rate when it is at
    least ``target``. ``limit``, where the design sets an absolute bound on
    the subject itself (a latency, a share of a core), must hold as well: at
    most ``limit``, or at least it for a rate.
    """

    what: str
    subject: float
    baseline: float
    unit: str
    target: float | None  # None: a cost shown for what it is, with no target to meet
    higher_is_better: bool
    note: str = ""
    errors: int = 0
    limit: float | None = None
    shown: str = "the cost of what agentbox does by design"  # what a row with no target is

    @property
    def ratio(self) -> float:
        return self.subject / self.baseline if self.baseline else float("inf")

    @property
    def ok(self) -> bool:
        if self.target is None:
            return self.errors == 0
        met = self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target
        if self.limit is not None:
            met = met and (self.subject >= self.limit if self.higher_is_better
                           else self.subject <= self.limit)
        return met and self.errors == 0

    @property
    def target_text(self) -> str:
        if self.target is None:
            return f"none: {self.shown}"
        sign = "≥" if self.higher_is_better else "≤"
        text = f"{sign} {self.target:g}{TIMES}"
        if self.limit is not None:
            text += f", {sign} {format_value(self.limit, self.unit)}"
        return text

    def document(self) -> dict[str, object]:
        return {**asdict(self), "ratio": self.ratio, "ok": self.ok}

    @classmethod
    def from_document(cls, doc: dict[str, object]) -> Row:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in doc.items() if k in names})  # type: ignore[arg-type]


def time_row(what: str, subject_s: float, baseline_s: float, target: float | None,
             note: str = "", errors: int = 0, limit_s: float | None = None,
             shown: str = Row.shown) -> Row:
    """A row of wall times in milliseconds; lower is better."""
    return Row(what, subject_s * 1000, baseline_s * 1000, "ms", target, False, note, errors,
               None if limit_s is None else limit_s * 1000, shown)


def rate_row(what: str, subject: float, baseline: float, target: float | None,
             unit: str = "ev/s",
             note: str = "", errors: int = 0) -> Row:
    """A row of throughputs; higher is better."""
    return Row(what, subject, baseline, unit, target, True, note, errors)


def format_value(value: float, unit: str) -> str:
    if unit == "items":  # a count
        return f"{value:,.0f} {unit}"
    if value >= 100 or (unit != "ms" and value >= 10):
        return f"{value:,.0f} {unit}"
    return f"{value:.{1 if value >= 10 else 2 if value >= 1 else 3}f} {unit}"


def options(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help="small N: check that the script works, not the figures")
    parser.add_argument("--json", action="store_true",
                        help="print the rows as one JSON document (used by run.py)")
    parser.add_argument("--dir", default=os.environ.get("AGENTBOX_BENCH_DIR"),
                        help="where the databases go (default: the system temp folder, "
                        "or $AGENTBOX_BENCH_DIR); use the disk you care about")
    parser.add_argument("--pg", default=os.environ.get("AGENTBOX_BENCH_PG"),
                        help="the PostgreSQL server of the pg_* scripts (default: "
                        "$AGENTBOX_BENCH_PG, else postgresql://postgres@127.0.0.1:5432/test)")
    return parser.parse_args(argv)


def report(rows: Sequence[Row], args: argparse.Namespace) -> None:
    """Print the rows: JSON for run.py, else one readable block per row."""
    if args.json:
        sys.stdout.write(json.dumps({"rows": [r.document() for r in rows]}) + "\n")
        return
    for r in rows:
        print(f"{r.what}\n  subject  {format_value(r.subject, r.unit)}"
              f"\n  baseline {format_value(r.baseline, r.unit)}"
              f"\n  ratio    {r.ratio:.2f}{TIMES}  (target {r.target_text}: "
              f"{'ok' if r.ok else 'MISSED'})"
              + (f"\n  errors   {r.errors}" if r.errors else "")
              + (f"\n  note     {r.note}" if r.note else ""))


def progress(message: str) -> None:
    """Progress on stderr, so stdout stays the result."""
    sys.stderr.write(f"  {message}\n")
    sys.stderr.flush()


@contextmanager
def workdir(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """A fresh folder for one script's databases, removed afterwards."""
    parent = args.dir or None
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"agentbox-bench-{name}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def interleaved(rounds: int, runs: Mapping[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Call every measurement once per round, rotating which goes first.

    Each callable returns one figure; rotating the order keeps a steady
    drift in machine load (or a warm cache) from favouring one side.
    """
    names = list(runs)
    figures: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            figures[name].append(runs[name]())
    return figures


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def slices(per_slice: int, step: Callable[[int], object]) -> Callable[[], float]:
    """A side for :func:`interleaved`: the rate of ``per_slice`` calls of ``step(i)``.

    ``i`` counts on across slices, so each call can write a row of its own.
    """
    numbers = iter(range(10**12))

    def one_slice() -> float:
        return per_slice / timed(lambda: [step(next(numbers)) for _ in range(per_slice)])

    return one_slice


def engine_cycle(store: Any, holder: str, ttl: int, policy: Any) -> int:
    """What `agentbox run` does to a store, the handler left out: acquire, claim, finish,
    release. Returns how many events it finished."""
    generation = store.acquire(holder, T0, ttl)
    assert generation is not None
    claimed = store.claim(holder, generation, T0, policy)
    assert claimed is not None
    assert store.finish(holder, generation, T0, [e.id for e in claimed])
    assert store.release(holder, generation, T0)
    return len(claimed)


def hand_cycle(hand: Any) -> int:
    """The same cycle through a hand-written baseline with acquire, claim, finish and release."""
    generation = hand.acquire(T0)
    ids = hand.claim(generation, T0)
    hand.finish(generation, T0, ids)
    hand.release(generation, T0)
    return len(ids)


def event_listings(stores: Mapping[str, Any]) -> list[tuple[str, Callable[[str], float]]]:
    """`events list --state pending --limit 100` and `events list --limit 100` (every
    state) on each of ``stores``, for :func:`scale_rows`."""
    return [("events list --state pending --limit 100",
             lambda name: timed(lambda: stores[name].events(("pending",), limit=100))),
            ("events list --limit 100",
             lambda name: timed(lambda: stores[name].events(limit=100)))]


# A read on PostgreSQL takes a tenth of a millisecond, most of it the round trip, whose
# time depends on where the scheduler has put that session's server process: two
# sessions alternating read by read can sit at 0.07 and 0.13 ms for a whole run (the
# dead list's big-over-small ratio came out 1.8x in one run and 0.5x in the next, on
# the same code). Reopening each side's session every REOPEN_EVERY reads spreads both
# over the same mix (six runs in a row: 0.93x to 0.97x); the first WARM_CALLS reads of
# a new session go untimed, so that psycopg has prepared the statement (on its fifth
# execution) as it had for the long-lived session before.
REOPEN_EVERY = 25
WARM_CALLS = 6


def scale_rows(what: str, stores: dict[str, Any], holder: str, policy: Any,
               claim_rounds: int, read_rounds: int, note: str,
               extra: Sequence[tuple[str, Callable[[str], float]]] = (),
               reopen: Callable[[str], Any] | None = None) -> list[Row]:
    """Time claim+finish (a full batch), status, dead list and ``extra`` reads on a
    ``big`` and a ``small`` store, alternating; one row each, big over small.

    ``reopen``: a fresh store of a side, by name, put in ``stores`` in place of the
    old one (closed) every :data:`REOPEN_EVERY` reads of that side (see there why).
    """
    generations = {name: s.acquire(holder, T0, 10**9) for name, s in stores.items()}
    reads = dict.fromkeys(stores, 0)

    def fresh_now_and_then(read: Callable[[str], float]) -> Callable[[str], float]:
        if reopen is None:
            return read

        def one(name: str) -> float:
            if reads[name] and reads[name] % REOPEN_EVERY == 0:
                stores[name].close()
                stores[name] = reopen(name)
                for _ in range(WARM_CALLS):
                    read(name)
            reads[name] += 1
            return read(name)
        return one

    def claim_finish(name: str) -> float:
        s, generation = stores[name], generations[name]

        def go() -> None:
            claimed = s.claim(holder, generation, T0, policy)
            assert claimed is not None and len(claimed) == policy.max_batch
            assert s.finish(holder, generation, T0, [e.id for e in claimed])
        return timed(go)

    rows: list[Row] = []
    for label, op, rounds in (
            ("claim+finish", claim_finish, claim_rounds),
            ("status", fresh_now_and_then(lambda name: timed(stores[name].status)), read_rounds),
            ("dead list", fresh_now_and_then(lambda name: timed(stores[name].dead)),
             read_rounds),
            *((label, fresh_now_and_then(op), read_rounds) for label, op in extra)):
        reads.update(dict.fromkeys(stores, 0))
        progress(f"{what.split(':')[0]}: {label}, {rounds} rounds each")
        sides = {"big": partial(op, "big"), "small": partial(op, "small")}
        interleaved(1, sides)  # warm-up
        times = interleaved(rounds, sides)
        rows.append(time_row(what.format(label=label), median(times["big"]),
                             median(times["small"]), 1.5,
                             note=f"median of {rounds}; {note}"))
    return rows


def run_program(argv: Sequence[str], env: dict[str, str],
                stdin: bytes | None = None) -> tuple[float, float]:
    """Run a program to its end: (wall seconds, CPU seconds it used).

    CPU time (user + system, from the kernel's child accounting) is less
    disturbed by other load than wall time, so it is shown beside it.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, input=stdin, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): "
                         f"{done.stderr.decode(errors='replace')[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def wait(condition: Callable[[], object], what: str, timeout: float = 60.0,
         every: float = 0.005) -> None:
    """Poll ``condition`` until it holds (SystemExit after ``timeout`` seconds). What the
    watch and pool figures measure is stamped by the programs themselves, so the polling
    only decides how soon the next measurement starts."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a watcher (started with its stderr piped) by SIGTERM; it must exit 0."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"a watcher exited {proc.returncode}: {err.decode()[-500:]}")


def cpu_seconds(pid: int) -> float:
    """CPU time a running process has used so far (Linux): nanoseconds from schedstat
    where the kernel keeps them, else user + system clock ticks."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], share: float) -> float:
    """The value below which ``share`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def raw_connect(path: Path) -> sqlite3.Connection:
    """What a careful bare-sqlite3 program opens: WAL, synchronous=FULL, a busy timeout."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


# What a user's bare alternative keeps: one plain table with its key, nothing else.
PLAIN_SCHEMA = """CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (source, source_id))"""


def plain_inbox(path: Path) -> Path:
    """An empty plain table for a baseline: no history, no counts, no second index."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = raw_connect(path)
    conn.execute(PLAIN_SCHEMA)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def make_inbox(path: Path) -> Path:
    """An empty inbox made by agentbox itself: its real schema, triggers and indexes."""
    from agentbox.backends.sqlite import db

    conn = db.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


def filled_inbox(path: Path, *statements: tuple[str, Mapping[str, object]]) -> Path:
    """An engine-made inbox filled by plain SQL in one transaction, then checkpointed.

    The schema is the real one, triggers included; only the filling skips the
    engine, so a large inbox takes seconds to build. Building is not what is
    measured, so it is not made durable.
    """
    make_inbox(path)
    conn = raw_connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN IMMEDIATE")
    for sql, params in statements:
        conn.execute(sql, params)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


EVENTS_FILL = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total),
k(i, state) AS (
    SELECT i, CASE WHEN i > :total - :pending THEN 'pending'
                   WHEN i % :dead_every = 0 AND i <= :dead_every * :dead THEN 'dead'
                   ELSE 'done' END FROM n)
INSERT INTO events (id, source, source_id, payload, status, attempts, claim_gen, error,
                    created_at, updated_at)
SELECT i, 'github', 'delivery-' || i,
       '{"action":"opened","number":' || i || ',"repo":"octo/bench","text":"look"}',
       state,
       CASE state WHEN 'pending' THEN 0 WHEN 'dead' THEN 3 ELSE 1 END,
       CASE state WHEN 'pending' THEN NULL ELSE 1 END,
       CASE state WHEN 'dead' THEN 'too many attempts (3); last: handler exited 1' END,
       :t0 - :total + i, :t0 - :total + i
FROM k"""


def events_inbox(path: Path, total: int, pending: int, dead: int) -> Path:
    """An inbox of ``total`` events, mostly done with their history, ``dead`` dead ones
    spread through it and ``pending`` pending ones at the end, built in seconds."""
    return filled_inbox(path, (EVENTS_FILL, {"total": total, "pending": pending,
                                             "dead_every": (total - pending) // dead,
                                             "dead": dead, "t0": T0}), (HISTORY, {}))


def copy_inbox(template: Path, dest: Path) -> Path:
    """A fresh copy of a checkpointed inbox (the WAL flag lives in the file header)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, dest)
    return dest


def payload(i: int) -> str:
    """A small webhook-like payload, already canonical JSON."""
    return json.dumps({"action": "opened", "number": i, "repo": "octo/bench",
                       "text": "please look at this"}, sort_keys=True, separators=(",", ":"))


def filesystem(path: Path) -> str:
    """The filesystem type holding ``path`` (Linux), to warn about tmpfs."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    target = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and target.startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def warn_if_memory(path: Path) -> None:
    kind = filesystem(path)
    if kind in ("tmpfs", "ramfs"):
        progress(f"warning: {path} is on {kind}: fsync costs nothing there, so durable-write "
                 "figures mean little; pass --dir on a real disk")


def clean_env(root: Path) -> dict[str, str]:
    """The environment of every program started: the same for subject and baselines.

    agentbox and coverage settings are dropped, and bytecode is cached under
    ``root`` even where PYTHONDONTWRITEBYTECODE is set: an installed agentbox
    has its bytecode compiled, and recompiling its modules at every start
    would be measuring the environment, not agentbox. The first (warm-up)
    runs fill the cache for every program alike.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENTBOX_", "COVERAGE_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return env


class Homes:
    """Fresh places to start a program in, each with a copy of the same empty inbox."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.template = make_inbox(root / "template.sqlite3")
        self.plain_template = plain_inbox(root / "plain-template.sqlite3")
        self.env = clean_env(root)
        self._serial = 0

    def _next(self) -> Path:
        self._serial += 1
        return self.root / f"home{self._serial}"

    def agentbox(self) -> dict[str, str]:
        """The environment of an `agentbox` process whose home holds a fresh inbox."""
        home = self._next()
        copy_inbox(self.template, home / "inboxes" / "bench.sqlite3")
        return {**self.env, "AGENTBOX_HOME": str(home), "AGENTBOX_USER": "bench"}

    def inbox(self) -> Path:
        """A fresh copy of agentbox's empty inbox, for measuring its schema's own cost."""
        return copy_inbox(self.template, self._next() / "inbox.sqlite3")

    def plain(self) -> Path:
        """A fresh plain keyed table: what a baseline program writes into."""
        return copy_inbox(self.plain_template, self._next() / "plain.sqlite3")


def console_script(name: str = "agentbox") -> Path:
    """The installed console script beside this interpreter (the venv's bin)."""
    script = Path(sys.executable).parent / name
    if not script.exists():
        raise SystemExit(f"{script} not found: run the benchmarks with the Python of the "
                         "environment where agentbox is installed")
    return script
