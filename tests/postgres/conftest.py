"""PostgreSQL only: several hosts on one database, its locks, LISTEN/NOTIFY, schemas.

Every module here is marked ``postgres_only``; the root fixtures (``home``,
``open_inbox``, ``agentbox_proc``, …) point at the test's fresh schema, which
``pg_url`` names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from agentbox.ledger.store import Store
from agentbox.location import is_url, open_store
from support.postgres import LOCK_TIMEOUT_S

if TYPE_CHECKING:
    import psycopg


@pytest.fixture
def pg_url(place: str) -> str:
    assert is_url(place), "the tests in tests/postgres are marked postgres_only"
    return place


@pytest.fixture
def impatient(pg_url: str) -> Iterator[Store]:
    """Alice's inbox opened with a lock timeout short enough for a test to wait out."""
    with open_store(pg_url, "alice", busy_timeout=LOCK_TIMEOUT_S) as opened:
        yield opened


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every message this process's connections send, in order: a round trip each."""
    import psycopg

    messages: list[str] = []
    execute = psycopg.Connection.execute

    def counted(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        messages.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    yield messages
