"""Engine fixtures: workers over the shared on-disk ``store``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentbox.backends.sqlite.store import SqliteStore
from agentbox.rules.policy import Policy

from .enginekit import POLICY, Worker

MakeWorker = Callable[..., Worker]


@pytest.fixture
def worker(store: SqliteStore) -> MakeWorker:
    """worker("A") or worker("A", policy): a named worker on the test's store."""

    def make(holder: str, policy: Policy = POLICY) -> Worker:
        return Worker(store, holder, policy)

    return make
