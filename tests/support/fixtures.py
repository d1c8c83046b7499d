"""The fixtures every test folder gets: the backend and the place its inboxes live,
an isolated AGENTBOX_HOME pointed at that place, the CLI in-process and as a process,
background processes, the test handler and sender, and alice's inbox.

Every test that touches an inbox runs once per backend: ``place`` (and so ``home``,
``store``, ``open_inbox``, ``cli``, every process a test starts) is a folder of
SQLite files, or a fresh PostgreSQL schema that ``AGENTBOX_DB`` names. A test that
reads or writes an SQLite file itself is marked ``sqlite_file``, one about what only
PostgreSQL has ``postgres_only``; tests/conftest.py drops the other backend's run
of it. A fixture name means one thing everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.location import is_url, open_store
from support.handler import BATCH_LOGGER, HANDLER
from support.postgres import fresh_schema
from support.processes import proc_env
from support.sending import Sender
from support.watching import Watcher, launch

BACKENDS = ("sqlite", "postgres")
Opener = Callable[..., Store]  # the ``open_inbox`` fixture: open_inbox(user="alice") -> Store

Cli = Callable[..., Any]  # the ``cli`` fixture: cli(*argv, now=None, stdin=None) -> CliResult
Proc = Callable[..., subprocess.CompletedProcess[str]]  # the ``agentbox_proc`` fixture


@dataclass
class CliResult:
    """What an in-process CLI call gave: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    """The backend this run of the test is on."""
    return str(request.param)


@pytest.fixture
def place(backend_name: str, tmp_path: Path) -> Iterator[str]:
    """Where the test's inboxes live: the folder of SQLite files under its home, or the
    URL of a fresh PostgreSQL schema, dropped afterwards."""
    if backend_name == "postgres":
        with fresh_schema() as url:
            yield url
        return
    yield str(tmp_path / "home" / "inboxes")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str) -> Path:
    """A fresh AGENTBOX_HOME, user 'alice', no other AGENTBOX_* variable but, on
    PostgreSQL, AGENTBOX_DB naming the test's schema."""
    for name in list(os.environ):
        if name.startswith("AGENTBOX_"):
            monkeypatch.delenv(name)
    root = tmp_path / "home"
    monkeypatch.setenv("AGENTBOX_HOME", str(root))
    monkeypatch.setenv("AGENTBOX_USER", "alice")
    if is_url(place):
        monkeypatch.setenv("AGENTBOX_DB", place)
    return root


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """Run agentbox in-process: cli("status", "--json", now=T0, stdin="...")."""
    from agentbox.cli import run

    def invoke(*argv: str, now: int | None = None, stdin: str | bytes | None = None) -> CliResult:
        import io

        if now is not None:
            monkeypatch.setenv("AGENTBOX_NOW", str(now))
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        capsys.readouterr()
        code = run(list(argv))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def agentbox_proc(home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run agentbox as a real process (python -m agentbox) and wait for it."""

    def invoke(*argv: str, env: Mapping[str, str] | None = None, stdin: str | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agentbox", *argv], input=stdin,
                              capture_output=True, text=True, timeout=timeout,
                              env={**proc_env(home), **(env or {})})

    return invoke


@pytest.fixture
def handler(tmp_path: Path) -> list[str]:
    """argv of the test handler (see support.handler.HANDLER); append its options."""
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    return [sys.executable, str(script)]


@pytest.fixture
def batch_logger(tmp_path: Path) -> tuple[list[str], Path]:
    """argv of support.handler.BATCH_LOGGER (append its sleep in seconds) and its log."""
    script = tmp_path / "batch_logger.py"
    script.write_text(BATCH_LOGGER)
    log = tmp_path / "batches.jsonl"
    return [sys.executable, str(script), str(log)], log


@pytest.fixture
def start(home: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """start(*argv, now=None, env=None): `agentbox ARGV` in the background, reaped at the end.

    It gets this environment (which the ``home`` fixture isolated) without
    AGENTBOX_NOW, then ``now`` as AGENTBOX_NOW and ``env``.
    """
    procs: list[subprocess.Popen[str]] = []

    def begin(*argv: str, now: int | None = None,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        full = {k: v for k, v in os.environ.items() if k != "AGENTBOX_NOW"}
        if now is not None:
            full["AGENTBOX_NOW"] = str(now)
        proc = subprocess.Popen([sys.executable, "-m", "agentbox", *argv],
                                env={**full, **(env or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield begin
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


@pytest.fixture
def store(open_inbox: Opener) -> Store:
    """Alice's inbox, open: a fresh store on the test's backend (engine-level tests)."""
    return open_inbox()


@pytest.fixture
def start_watcher(home: Path, tmp_path: Path) -> Iterator[Callable[..., Watcher]]:
    """start_watcher("run", "--watch", ..., name="a", env={...}): a long-running agentbox
    process for alice; every one still running at the end is killed."""
    started: list[Watcher] = []

    def begin(*argv: str, name: str = "watcher",
              env: Mapping[str, str] | None = None) -> Watcher:
        watcher = launch(tmp_path, name, list(argv), {**proc_env(home), **(env or {})})
        started.append(watcher)
        return watcher

    yield begin
    for watcher in started:
        if watcher.proc.poll() is None:
            watcher.kill()


@pytest.fixture
def rows(open_inbox: Opener) -> Callable[..., list[tuple[Any, ...]]]:
    """rows(sql, **params): what a statement reads from alice's inbox's tables, in SQL
    both engines run (``:name`` parameters); the test's place holds its own inboxes only.
    It opens alice's inbox, making it if need be."""

    def read(sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in open_inbox()._read().rows(sql, **params)]

    return read


@pytest.fixture
def inbox_path(place: str) -> Path:
    """Where alice's inbox file lives under the test's AGENTBOX_HOME (SQLite only)."""
    assert not is_url(place), "a test that reads the inbox file is marked sqlite_file"
    return Path(place) / "alice.sqlite3"


@pytest.fixture
def open_inbox(place: str) -> Iterator[Opener]:
    """open_inbox(user="alice"): that user's inbox where the CLI finds it (made if need
    be), a fresh connection each call, as another process would open it; every one is
    closed at the end."""
    opened: list[Store] = []

    def open_one(user: str = "alice") -> Store:
        target = place if is_url(place) else Path(place) / f"{user}.sqlite3"
        store = open_store(target, user, make_folders=True)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def sender(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sender:
    """A recording sender; in-process CLI runs see its log in the environment."""
    found = Sender.in_folder(tmp_path)
    monkeypatch.setenv("SENDER_LOG", str(found.log))
    monkeypatch.delenv("SENDER_WAIT_FOR", raising=False)
    monkeypatch.setenv("SENDER_EXIT", "0")
    return found
