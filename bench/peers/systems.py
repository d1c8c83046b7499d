"""The sides of the peer figures: agentbox and each peer, driven through its public API.

Every side stores an item (a key and the same small webhook body) the way a
user of it would, with its own dedupe feature, and says whether it stored
it; counts what it holds; and names the command of its own worker, whose
task notes its start time (apps/stamps.py; agentbox's handler does the same
as a program). All write with agentbox's durability: on SQLite, WAL and
``synchronous = FULL``; on PostgreSQL, ``fsync`` and ``synchronous_commit``
on (peerlib checks the server), which none of the peers turns off.

- agentbox: ``agentbox.open(...).ingest``, one durable transaction; the key
  is ``UNIQUE(source, source_id)`` for the event's whole life.
- huey: ``stamp(key, payload)`` on a ``SqliteHuey``; huey has no dedupe, so
  a redelivery is a second task. ``huey + guard``: what a user would add,
  huey's own ``put_if_empty`` on the key first (a durable transaction of
  its own: huey's API commits each call, so the guard and the task cannot
  share one; a crash between them loses the item).
- procrastinate: ``stamp.configure(queueing_lock=key).defer(...)``; the lock
  refuses a key only while a job holding it waits (``todo``).
- pgqueuer: ``SyncQueries.enqueue(..., dedupe_key=key, on_conflict="skip")``;
  the key refuses only while its job is queued or picked.
- DBOS: ``DBOSClient.enqueue`` on queue ``bench`` with the key as workflow id
  and ``workflow_id_reuse_policy="reject"``, so it says when a key was seen;
  a workflow id is kept as long as its workflow's record.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import MappingProxyType

from peerlib import APPS, keyed_stamps, pg_schema

import pglib
from benchlib import console_script

SQLITE, PG = "SQLite", "PostgreSQL"
AGENTBOX = [sys.executable, "-m", "agentbox"]
# agentbox's handler: a shell script noting its start time first, as watch.py's does.
STAMP_SH = 'date +%s.%N >> "$1"\ncat > /dev/null\n'
# The drain's handler notes when each batch starts and when its handler is done.
DRAIN_SH = 'date +%s.%N >> "$1"\ncat > /dev/null\ndate +%s.%N >> "$1.end"\n'


class System:
    """One side: a place holding its items, its enqueue, and its worker's command."""

    label: str
    backend: str
    env: dict[str, str]

    def enqueue(self, key: str, body: str) -> bool:
        """Store one item durably; False when the system refused it as a duplicate."""
        raise NotImplementedError

    def held(self) -> int:
        """How many items (jobs, events, workflows) it keeps now."""
        raise NotImplementedError

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        """The command of its worker, and the environment it needs, noting starts in
        ``stamps``."""
        raise NotImplementedError

    def cli(self, key: str, body: str) -> list[str] | None:
        """The command line of its own CLI storing one item; None where it has none."""
        return None

    def started(self, stamps: Path, key: str, count: int) -> float | None:
        """When its worker began the task of ``key``, the ``count``-th item, if it has."""
        times = keyed_stamps(stamps).get(key)
        return times[0] if times else None

    def close(self) -> None:
        """Let go of its connections (what it stored stays)."""


class Agentbox(System):
    """agentbox's inbox for user ``bench``: a file in a home of its own, or a fresh schema.

    ``handler`` is the program ``run --watch`` starts per batch; it gets the
    stamps file as its last argument.
    """

    def __init__(self, db: str, env: dict[str, str], backend: str,
                 handler: Sequence[str], label: str = "agentbox") -> None:
        import agentbox

        self.label, self.backend, self.handler = label, backend, list(handler)
        self.env = {**env, "AGENTBOX_USER": "bench"}
        self.inbox = agentbox.open(user="bench", db=db)

    def enqueue(self, key: str, body: str) -> bool:
        return self.inbox.ingest("bench", key, body, int(time.time())).outcome == "stored"

    def held(self) -> int:
        return sum(self.status().values())

    def status(self) -> dict[str, int]:
        """Its events by state, as `agentbox status --json` counts them."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
        done = subprocess.run([*AGENTBOX, "status", "--json"], env={**env, **self.env},
                              check=True, capture_output=True, text=True)
        return dict(json.loads(done.stdout)["events"])

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        return [*AGENTBOX, "run", "--watch", "--", *self.handler, str(stamps)], self.env

    def cli(self, key: str, body: str) -> list[str]:
        return [str(console_script()), "ingest", "bench", key, "--payload", body]

    def started(self, stamps: Path, key: str, count: int) -> float | None:
        """The handler notes no key: its ``count``-th start is that of the ``count``-th
        item, each handed over alone."""
        lines = stamps.read_text().split() if stamps.exists() else []
        return float(lines[count - 1]) if len(lines) >= count else None

    def close(self) -> None:
        self.inbox.close()


def agentbox_sqlite(home: Path, handler: Sequence[str], label: str = "agentbox") -> Agentbox:
    """An agentbox home whose user ``bench`` has an empty inbox, as `agentbox` makes it."""
    path = home / "inboxes" / "bench.sqlite3"
    path.parent.mkdir(parents=True)
    return Agentbox(str(path), {"AGENTBOX_HOME": str(home)}, SQLITE, handler, label)


def agentbox_pg(stack: ExitStack, url: str, home: Path, handler: Sequence[str],
                label: str = "agentbox") -> Agentbox:
    """agentbox on a fresh schema of its own (made by agentbox, dropped afterwards)."""
    fresh = stack.enter_context(pglib.schema(url, "peers"))
    home.mkdir(parents=True)
    return Agentbox(fresh, {"AGENTBOX_HOME": str(home), "AGENTBOX_DB": fresh}, PG, handler,
                    label)


class Huey(System):
    """huey on a SQLite file of its own; ``guard``: with a dedupe guard on its key."""

    backend = SQLITE

    def __init__(self, path: Path, guard: bool = False) -> None:
        import huey_app

        self.app, self.task = huey_app.make(str(path))
        self.guard = guard
        self.label = "huey + guard" if guard else "huey"
        self.env = {"PEER_DB": str(path)}

    def enqueue(self, key: str, body: str) -> bool:
        if self.guard and not self.app.put_if_empty(f"seen:{key}", 1):
            return False
        self.task(key, body)
        return True

    def held(self) -> int:
        return int(self.app.pending_count())

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        return ([str(console_script("huey_consumer")), "huey_app.huey"],
                {**self.env, "PEER_STAMPS": str(stamps)})

    def close(self) -> None:
        self.app.storage.close()


def conninfo(url: str, schema: str) -> str:
    """A libpq connection string for ``url`` with ``schema`` first on the search path."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, options=f"-c search_path={schema}")


class Procrastinate(System):
    """procrastinate on a fresh schema, its tables made by its own schema manager."""

    label, backend = "procrastinate", PG

    def __init__(self, stack: ExitStack, url: str) -> None:
        import procrastinate_app
        import psycopg
        from procrastinate.exceptions import AlreadyEnqueued

        self.refused = AlreadyEnqueued
        self.conninfo = conninfo(url, stack.enter_context(pg_schema(url, "procrastinate")))
        self.app, self.task = procrastinate_app.make(self.conninfo)
        self.app.open()
        self.app.schema_manager.apply_schema()
        self.counter = psycopg.connect(self.conninfo, autocommit=True)
        self.env = {"PEER_DB": self.conninfo}

    def enqueue(self, key: str, body: str) -> bool:
        try:
            self.task.configure(queueing_lock=key).defer(key=key, payload=body)
        except self.refused:
            return False
        return True

    def held(self) -> int:
        row = self.counter.execute("SELECT count(*) FROM procrastinate_jobs").fetchone()
        return int(row[0]) if row else 0

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        return ([str(console_script("procrastinate")), "--app=procrastinate_app.app", "worker"],
                {**self.env, "PEER_STAMPS": str(stamps)})

    def cli(self, key: str, body: str) -> list[str]:
        """`procrastinate defer`, its queueing lock the key."""
        return [str(console_script("procrastinate")), "--app=procrastinate_app.app", "defer",
                "stamp", json.dumps({"key": key, "payload": body}), "--queueing-lock", key]

    def close(self) -> None:
        self.counter.close()
        self.app.close()


class Pgqueuer(System):
    """pgqueuer on a fresh schema, installed by `pgq install` (its durable tables)."""

    label, backend = "pgqueuer", PG

    def __init__(self, stack: ExitStack, url: str, env: dict[str, str]) -> None:
        import psycopg
        from pgqueuer.db import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        self.schema = stack.enter_context(pg_schema(url, "pgqueuer"))
        self.pgq = str(console_script("pgq"))
        subprocess.run([self.pgq, "--pg-dsn", url, "--schema", self.schema, "install",
                        "--durability", "durable"], env=env, check=True,
                       capture_output=True)
        self.url = url
        self.conn = psycopg.connect(conninfo(url, self.schema), autocommit=True)
        self.queries = SyncQueries(SyncPsycopgDriver(self.conn))
        self.env = {"PEER_DB": url, "PEER_SCHEMA": self.schema}

    def enqueue(self, key: str, body: str) -> bool:
        payload = json.dumps({"key": key, "payload": body}).encode()
        ids = self.queries.enqueue("stamp", payload, dedupe_key=key, on_conflict="skip")
        return ids[0] is not None

    def held(self) -> int:
        return sum(s.count for s in self.queries.queue_size())

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        return ([self.pgq, "run", "pgqueuer_app:main"], {**self.env, "PEER_STAMPS": str(stamps)})

    def cli(self, key: str, body: str) -> list[str]:
        """`pgq queue`, its dedupe key the key, a duplicate skipped."""
        return [self.pgq, "--pg-dsn", self.url, "--schema", self.schema, "queue", "stamp",
                json.dumps({"key": key, "payload": body}), "--dedupe-key", key,
                "--on-conflict", "skip"]

    def close(self) -> None:
        self.conn.close()


class Dbos(System):
    """DBOS Transact with its system database on SQLite (a file in WAL mode, synchronous
    FULL, SQLite's default) or on PostgreSQL (a fresh schema); tables made by
    ``DBOS.migrate``, items enqueued by a ``DBOSClient``."""

    label = "DBOS"

    def __init__(self, stack: ExitStack, *, path: Path | None = None,
                 url: str | None = None) -> None:
        from dbos import DBOS, DBOSClient, error

        self.refused = error.DBOSWorkflowIDInUseError
        if path is not None:
            with sqlite3.connect(path) as conn:  # WAL is kept in the file; DBOS opens it so
                conn.execute("PRAGMA journal_mode=WAL")
            self.backend, system_db, schema = SQLITE, f"sqlite:///{path}", "dbos"
        else:
            assert url is not None
            self.backend = PG
            system_db = url.replace("postgresql://", "postgresql+psycopg://", 1)
            schema = stack.enter_context(pg_schema(url, "dbos"))
        DBOS.migrate(system_db, schema=schema)
        self.client = DBOSClient(system_database_url=system_db, dbos_system_schema=schema)
        self.env = {"PEER_DB": system_db, "PEER_SCHEMA": schema}

    def enqueue(self, key: str, body: str) -> bool:
        try:
            self.client.enqueue({"queue_name": "bench", "workflow_name": "stamp",
                                 "workflow_id": key, "workflow_id_reuse_policy": "reject"},
                                key, body)
        except self.refused:
            return False
        return True

    def held(self) -> int:
        return len(self.client.list_workflows(load_input=False, load_output=False))

    def worker(self, stamps: Path) -> tuple[list[str], dict[str, str]]:
        return ([sys.executable, str(APPS / "dbos_app.py")],
                {**self.env, "PEER_STAMPS": str(stamps)})

    def close(self) -> None:
        self.client.destroy()


def handler_script(root: Path, name: str, text: str) -> list[str]:
    """A shell handler written once under ``root``: the argv prefix that runs it."""
    script = root / name
    if not script.exists():
        script.write_text(text)
    return ["/bin/sh", str(script)]


def enqueuers(stack: ExitStack, root: Path, url: str | None, env: dict[str, str],
              handlers: Mapping[str, Sequence[str]] = MappingProxyType({"agentbox": ()}),
              guard: bool = True) -> list[System]:
    """Every side of a figure, each in a fresh place of its own: on SQLite agentbox (once
    per handler, by label), huey, huey + guard (unless not ``guard``) and DBOS; with a
    server, on PostgreSQL agentbox again, procrastinate, pgqueuer and DBOS. Each is
    closed when ``stack`` is."""
    found: list[System] = [agentbox_sqlite(root / f"agentbox-{n}", handler, label)
                           for n, (label, handler) in enumerate(handlers.items())]
    found += [Huey(root / "huey.db"), *([Huey(root / "guard.db", guard=True)] if guard else []),
              Dbos(stack, path=root / "dbos.sqlite")]
    if url is not None:
        found += [agentbox_pg(stack, url, root / f"agentbox-pg-{n}", handler, label)
                  for n, (label, handler) in enumerate(handlers.items())]
        found += [Procrastinate(stack, url), Pgqueuer(stack, url, env), Dbos(stack, url=url)]
    for system in found:
        stack.callback(system.close)
    return found


def by_backend(systems: Sequence[System], label: str = "agentbox"
               ) -> list[tuple[System, System]]:
    """(agentbox, peer) for every peer, agentbox (the side of ``label``) being the one on
    the peer's backend."""
    ours = {s.backend: s for s in systems if isinstance(s, Agentbox) and s.label == label}
    return [(ours[s.backend], s) for s in systems if not isinstance(s, Agentbox)]


class Worker:
    """A side's worker, running: its process (in a session of its own) and its stamps."""

    def __init__(self, system: System, root: Path, name: str, env: dict[str, str]) -> None:
        self.stamps = root / f"{name}.stamps"
        self.log = root / f"{name}.log"
        argv, extra = system.worker(self.stamps)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, env={**env, **extra}, stdout=subprocess.DEVNULL,
                                         stderr=log, start_new_session=True)

    def check(self) -> None:
        """SystemExit, with the end of its log, if the worker has ended."""
        if self.proc.poll() is not None:
            raise SystemExit(f"a worker ended ({self.proc.returncode}): "
                             f"{self.log.read_text(errors='replace')[-800:]}")

    def stop(self) -> None:
        """SIGTERM, as each of them is stopped; its session killed if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
