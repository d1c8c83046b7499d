"""Shared fixtures: an isolated AGENTBOX_HOME, the CLI in-process, the CLI as a process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import watchtools
from agentbox.backends.sqlite.store import SqliteStore
from pgtools import SKIPPED, SKIPPED_AT
from proctools import proc_env
from runhelp import HANDLER
from watchtools import Watcher

T0 = 1_000_000  # the article's simulated clock starts here

if importlib.util.find_spec("psycopg") is None:
    # Those tests need the driver itself; the contract suite's PostgreSQL half
    # still reports (skips, or under AGENTBOX_REQUIRE_PG=1 fails) why it did not run.
    collect_ignore = ["postgres"]


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh AGENTBOX_HOME, user 'alice', and no other AGENTBOX_* variable."""
    for name in list(os.environ):
        if name.startswith("AGENTBOX_"):
            monkeypatch.delenv(name)
    root = tmp_path / "home"
    monkeypatch.setenv("AGENTBOX_HOME", str(root))
    monkeypatch.setenv("AGENTBOX_USER", "alice")
    return root


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run agentbox in-process: cli("status", "--json", now=T0, stdin="...")."""
    from agentbox.cli import run

    def invoke(*argv: str, now: int | None = None, stdin: str | bytes | None = None) -> Result:
        import io

        if now is not None:
            monkeypatch.setenv("AGENTBOX_NOW", str(now))
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        capsys.readouterr()
        code = run(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

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
    """argv of the test handler (see runhelp.HANDLER); append its options."""
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    return [sys.executable, str(script)]


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
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A fresh SQLite store on disk."""
    with SqliteStore(tmp_path / "inbox.sqlite3") as opened:
        yield opened


@pytest.fixture
def start_watcher(home: Path, tmp_path: Path) -> Iterator[Callable[..., Watcher]]:
    """start_watcher("run", "--watch", ..., name="a", env={...}): a long-running agentbox
    process for alice; every one still running at the end is killed."""
    started: list[Watcher] = []

    def begin(*argv: str, name: str = "watcher",
              env: Mapping[str, str] | None = None) -> Watcher:
        watcher = watchtools.start(tmp_path, name, list(argv), {**proc_env(home), **(env or {})})
        started.append(watcher)
        return watcher

    yield begin
    for watcher in started:
        if watcher.proc.poll() is None:
            watcher.kill()

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Every PostgreSQL skip reported at one place, so the summary folds them into one line."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and SKIPPED in str(longrepr[2]):
        report.longrepr = (SKIPPED_AT, 1, longrepr[2])
    return report
