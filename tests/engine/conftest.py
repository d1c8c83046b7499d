"""Engine fixtures: workers over the shared on-disk ``store``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentbox.engine.policy import Policy
from agentbox.engine.store import SqliteStore

from .enginekit import POLICY, Worker

MakeWorker = Callable[..., Worker]


@pytest.fixture
def worker(store: SqliteStore) -> MakeWorker:
    """worker("A") or worker("A", policy): a named worker on the test's store."""

    def make(holder: str, policy: Policy = POLICY) -> Worker:
        return Worker(store, holder, policy)

    return make
