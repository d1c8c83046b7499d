"""Shared plumbing of the peer figures: the extra, the server, rows, CPU of a process tree.

A peer figure sets agentbox beside a job queue it would be compared with,
each driven through its own public API with the same durability. Its rows
are :class:`benchlib.Row` with agentbox as the subject and the peer as the
baseline; their target, a ratio of 1, only says which way is better. They
are never a target to meet (``run.py --strict`` ignores them); the table
says which side is ahead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

PEERS = Path(__file__).resolve().parent
APPS = PEERS / "apps"
# The figure scripts run from here: the bench's own modules and the peers' apps import.
sys.path[:0] = [str(PEERS.parent), str(APPS)]

import benchlib  # noqa: E402
from benchlib import TIMES, Row, clean_env, format_value  # noqa: E402
from pglib import DEFAULT_URL  # noqa: E402

# The modules the bench-peers extra installs.
EXTRA = ("huey", "procrastinate", "pgqueuer", "asyncpg", "dbos")
INSTALL = "pip install -e '.[bench-peers]'"


def missing() -> list[str]:
    """The modules of the extra this interpreter cannot import."""
    return [name for name in EXTRA if importlib.util.find_spec(name) is None]


def skip(args: argparse.Namespace, why: str) -> NoReturn:
    """End the script, reporting itself skipped (run.py shows the reason)."""
    if args.json:
        sys.stdout.write(json.dumps({"rows": [], "skipped": why}) + "\n")
    else:
        print(f"skipped: {why}")
    sys.exit(0)


def require_extra(args: argparse.Namespace) -> None:
    absent = missing()
    if absent:
        skip(args, f"the bench-peers extra is not installed ({', '.join(absent)}): {INSTALL}")


def pg_server(args: argparse.Namespace) -> str | None:
    """The PostgreSQL server's URL, or None when there is none (the PostgreSQL half of a
    figure is then left out; under AGENTBOX_REQUIRE_PG=1 the script fails)."""
    import psycopg

    url = args.pg or DEFAULT_URL
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                        for name in ("fsync", "synchronous_commit")}
    except psycopg.Error as exc:
        if os.environ.get("AGENTBOX_REQUIRE_PG") == "1":
            raise SystemExit(f"AGENTBOX_REQUIRE_PG=1 but no PostgreSQL server: {exc}") from None
        print("  no PostgreSQL server: its peers are left out (pass --pg URL)", file=sys.stderr)
        return None
    if settings != {"fsync": "on", "synchronous_commit": "on"}:
        raise SystemExit(f"the server's durability differs from agentbox's: {settings}")
    return url


@contextmanager
def pg_schema(url: str, name: str) -> Iterator[str]:
    """A fresh empty schema for one peer's tables, dropped with them afterwards."""
    import secrets

    import psycopg

    schema = f"peer_bench_{name}_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def peer_env(root: Path) -> dict[str, str]:
    """The environment of every worker and CLI process: benchlib's, with the apps importable."""
    return {**clean_env(root), "PYTHONPATH": os.pathsep.join([str(APPS), *sys.path])}


def peer_row(what: str, agentbox: float, peer: float, unit: str, higher_is_better: bool,
             note: str = "", errors: int = 0) -> Row:
    """A row of the peer table: agentbox (subject) against a peer (baseline)."""
    return Row(what, agentbox, peer, unit, 1.0, higher_is_better, note, errors)


def ratio_text(row: Row) -> str:
    """The ratio, or a dash where the peer's figure is 0 (a count of nothing)."""
    return f"{row.ratio:.2f}{TIMES}" if row.baseline else "-"


def report(rows: list[Row], args: argparse.Namespace) -> None:
    """Print the rows: JSON for run.py, else one block per row saying which side is ahead."""
    if args.json:
        benchlib.report(rows, args)
        return
    for r in rows:
        print(f"{r.what}\n  agentbox {format_value(r.subject, r.unit)}"
              f"\n  peer     {format_value(r.baseline, r.unit)}"
              f"\n  ratio    {ratio_text(r)}  (ahead: {verdict(r)})"
              + (f"\n  errors   {r.errors}" if r.errors else "")
              + (f"\n  note     {r.note}" if r.note else ""))


def verdict(row: Row) -> str:
    """Which side a row of the peer table favours."""
    if row.subject == row.baseline:
        return "same"
    ahead = row.subject > row.baseline if row.higher_is_better else row.subject < row.baseline
    return "agentbox" if ahead else "peer"


def tree_cpu(pid: int) -> float:
    """CPU seconds used so far by a process, all its threads, and every descendant still
    running (Linux: each thread's schedstat, in nanoseconds)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            threads = list(Path(f"/proc/{current}/task").iterdir())
        except OSError:
            continue
        for thread in threads:
            try:
                total += int((thread / "schedstat").read_text().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):
                continue
        todo += children.get(current, [])
    return total


def keyed_stamps(path: Path) -> dict[str, list[float]]:
    """The start times a peer's tasks noted, by key (a key run twice has two)."""
    found: dict[str, list[float]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            key, at = line.split()
            found.setdefault(key, []).append(float(at))
    return found
