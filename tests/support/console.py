"""Inboxes with something for an operator to do: a dead event, an uncertain dispatch."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.outbox import Dispatch
from agentbox.rules.policy import Policy
from support.store import say

DISPATCH_TIMEOUT = 60


def dead_event(store: Store, key: str, now: int, payload: str = '{"text": "hi"}') -> int:
    """One event of source ``chat`` run to death in one attempt; its id."""
    policy = Policy(max_attempts=1)
    store.ingest("chat", key, payload, now)
    generation = store.acquire("test-worker", now, 60)
    assert generation is not None
    claimed = store.claim("test-worker", generation, now, policy)
    assert claimed
    assert store.fail("test-worker", generation, now, [e.id for e in claimed], "boom", policy)
    assert store.release("test-worker", generation, now)
    return claimed[0].id


def uncertain_dispatch(store: Store, now: int, body: str = "hello there") -> str:
    """A message sent at most once whose sender's word never came; its dispatch key."""
    say(store, now, body)
    claimed = store.claim_dispatch(now, "at-most-once", 0, DISPATCH_TIMEOUT)
    assert isinstance(claimed, Dispatch), claimed
    store.settle_dispatch(claimed.key, "unknown", now, "sender vanished",
                          attempt=claimed.tries)
    [message] = [m for m in store.outbox() if m.dispatch_key == claimed.key]
    assert message.state == "uncertain", message
    return claimed.key
