"""Engine fixtures: workers over the shared on-disk ``store``."""

from __future__ import annotations

import pytest

from agentbox.backends.sqlite.store import SqliteStore
from agentbox.rules.policy import Policy
from support.store import POLICY, MakeStepWorker, StepWorker


@pytest.fixture
def worker(store: SqliteStore) -> MakeStepWorker:
    """worker("A") or worker("A", policy): a named StepWorker on the test's store."""

    def make(holder: str, policy: Policy = POLICY) -> StepWorker:
        return StepWorker(store, holder, policy)

    return make
