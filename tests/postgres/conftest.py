"""PostgreSQL only: several hosts on one database, its locks, LISTEN/NOTIFY, schemas.

Every module here is marked ``postgres_only``; the root fixtures (``home``,
``open_inbox``, ``agentbox_proc``, …) point at the test's fresh schema, which
``pg_url`` names.
"""

from __future__ import annotations

import pytest

from agentbox.location import is_url


@pytest.fixture
def pg_url(place: str) -> str:
    assert is_url(place), "the tests in tests/postgres are marked postgres_only"
    return place
