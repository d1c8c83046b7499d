"""The ``backend`` fixture: one fresh, empty Store per test, on every backend.

The suite in this folder speaks to :class:`agentbox.ledger.store.Store` only:
no SQL, no file, no module of a backend. Every test runs once per backend
(see ``place`` in tests/support/fixtures.py), with the same expectations;
``open_inbox(user)`` opens a user's inbox in the test's place, and opening the
same user twice gives two connections to one inbox, as two processes would
have. A backend whose server is missing is skipped (see
tests/support/postgres.py).
"""

from __future__ import annotations

import pytest

from agentbox.ledger.store import Store
from support.fixtures import Opener


@pytest.fixture
def backend(open_inbox: Opener) -> Store:
    return open_inbox("alice")


@pytest.fixture
def other_backend(open_inbox: Opener, backend: Store) -> Store:
    """Another user's inbox beside ``backend`` (on PostgreSQL, in the same schema)."""
    return open_inbox("bob")


@pytest.fixture
def twin(open_inbox: Opener, backend: Store) -> Store:
    """A second connection to ``backend``'s own inbox, as another process would open it."""
    return open_inbox("alice")
