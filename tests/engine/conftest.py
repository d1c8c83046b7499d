"""Engine fixtures: workers over the shared on-disk ``store``."""

from __future__ import annotations

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.store import POLICY, MakeStepWorker, StepWorker


@pytest.fixture
def worker(store: Store) -> MakeStepWorker:
    """worker("A") or worker("A", policy): a named StepWorker on the test's store."""

    def make(holder: str, policy: Policy = POLICY) -> StepWorker:
        return StepWorker(store, holder, policy)

    return make
