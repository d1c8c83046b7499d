"""The messages a claim sends the server: the lock and what it reads go together, and
the claim itself goes with the COMMIT, so a handler starts two round trips after its
watcher woke (four before)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.clock import T0

pytestmark = pytest.mark.postgres_only
TTL = 600


@pytest.fixture
def sent(store: Store) -> Iterator[list[str]]:
    """Every message the store's connection sends from now on."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    messages: list[str] = []
    execute = conn.execute

    def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
        messages.append(str(query))
        return execute(query, *args, **kwargs)

    conn.execute = counted
    yield messages
    del conn.execute


def test_a_claim_is_two_round_trips_and_stands(store: Store, sent: list[str]) -> None:
    policy = Policy(lease_ttl=TTL, max_batch=2)
    first, second, third = (store.ingest("s", k, "{}", T0).id for k in "abc")
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    claimed = store.claim("w", generation, T0, policy)
    assert claimed is not None and [e.id for e in claimed] == [first, second]
    assert len(sent) == 2, sent
    assert sent[0].startswith("BEGIN") and sent[-1].rstrip().endswith("COMMIT")
    assert [(e.status, e.attempts, e.claim_gen) for e in claimed] == [
        ("running", 1, generation)] * 2
    assert [e.action for e in store.story(first)] == ["stored", "claimed"]
    assert store.story(first)[1].detail == "attempt 1"
    assert store.status().events["running"] == 2
    event = store.event(third)
    assert event is not None and event.status == "pending"


def test_an_empty_claim_is_two_round_trips(store: Store, sent: list[str]) -> None:
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    sent.clear()
    assert store.claim("w", generation, T0, Policy(lease_ttl=TTL)) == []
    assert len(sent) == 2, sent

