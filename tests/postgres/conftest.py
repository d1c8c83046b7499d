"""PostgreSQL fixtures: a fresh schema per test, with the CLI fixtures pointed at it.

``home`` (and so ``cli``, ``start_run`` and every process the tests start)
gets ``AGENTBOX_DB`` naming the test's schema; ``agentbox_proc`` passes it
on too; ``open_inbox()`` opens a user's inbox there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.location import open_store
from support.fixtures import Proc
from support.postgres import fresh_schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture
def home(home: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTBOX_DB", pg_url)
    return home


@pytest.fixture
def agentbox_proc(agentbox_proc: Proc, pg_url: str) -> Proc:
    def invoke(*argv: str, env: dict[str, str] | None = None,
               **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return agentbox_proc(*argv, env={"AGENTBOX_DB": pg_url, **(env or {})}, **kwargs)

    return invoke


@pytest.fixture
def open_inbox(pg_url: str) -> Iterator[Callable[..., Store]]:
    """open_inbox(user="alice"): that user's inbox in the test's schema, closed at the end."""
    opened: list[Store] = []

    def open_one(user: str = "alice") -> Store:
        store = open_store(pg_url, user)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()
