"""Fixtures for runs: the handler program, background `agentbox run` processes,
and the inbox file opened for inspection."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runhelp import HANDLER

from agentbox.backends.sqlite.store import SqliteStore


@pytest.fixture
def handler(tmp_path: Path) -> list[str]:
    """argv of the test handler; append its options."""
    script = tmp_path / "handler.py"
    script.write_text(HANDLER)
    return [sys.executable, str(script)]


@pytest.fixture
def inbox(home: Path) -> Iterator[Callable[[], SqliteStore]]:
    """Open alice's inbox file for inspection (a fresh connection each call)."""
    opened: list[SqliteStore] = []

    def open_store() -> SqliteStore:
        store = SqliteStore(home / "inboxes" / "alice.sqlite3")
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def start_run(home: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `agentbox run ARGS` in the background; every one is reaped at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, now: int | None = None) -> subprocess.Popen[str]:
        # The `home` fixture already isolated os.environ; only the clock differs per run.
        env = {k: v for k, v in os.environ.items() if k != "AGENTBOX_NOW"}
        if now is not None:
            env["AGENTBOX_NOW"] = str(now)
        proc = subprocess.Popen([sys.executable, "-m", "agentbox", "run", *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
