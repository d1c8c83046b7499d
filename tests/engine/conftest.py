"""Engine fixtures: workers over the shared on-disk ``store``; a folder of inbox files
and every inbox in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbox.backends.sqlite.inboxes import SqliteInboxes
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.store import POLICY, MakeStepWorker, StepWorker


@pytest.fixture
def worker(store: Store) -> MakeStepWorker:
    """worker("A") or worker("A", policy): a named StepWorker on the test's store."""

    def make(holder: str, policy: Policy = POLICY) -> StepWorker:
        return StepWorker(store, holder, policy)

    return make


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder for SQLite inbox files."""
    path = tmp_path / "inboxes"
    path.mkdir()
    return path


@pytest.fixture
def inboxes(folder: Path) -> Iterator[SqliteInboxes]:
    """Every inbox in ``folder``, as a pool serving them all opens them."""
    found = SqliteInboxes(folder)
    yield found
    found.close()
