"""Fixtures for runs: background `agentbox run` processes and the inbox file opened
for inspection (the handler program is tests/runhelp.py's, its fixture the root's)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentbox.backends.sqlite.store import SqliteStore


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
def start_run(start: Callable[..., subprocess.Popen[str]]) -> Callable[..., subprocess.Popen[str]]:
    """Start `agentbox run ARGS` in the background; every one is reaped at the end."""

    def start_one(*args: str, now: int | None = None) -> subprocess.Popen[str]:
        return start("run", *args, now=now)

    return start_one
