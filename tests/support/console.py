"""Inboxes with something for an operator to do: a dead event, an uncertain dispatch, a
step whose outcome is unknown."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.outbox import Dispatch
from agentbox.rules.policy import Policy
from agentbox.rules.steps import Outcome
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


def journal(store: Store, now: int, note: str = "refund <b>sent</b>") -> tuple[str, str]:
    """A state set by an operator, one step done and one whose try never finished (a
    worker that died inside it, seen by its successor in at-most-once): their keys."""
    generation = store.acquire("test-worker", now, 60)
    assert generation is not None
    assert store.set_state("test-worker", generation, now, {"note": note}, Policy()) == 1
    done, unsettled = "email:order-1042", "charge:order-1043"
    assert store.begin_step("test-worker", generation, done, now, "at-most-once").action == "run"
    assert store.end_step(done, generation, 1, Outcome("done", 0, b"message-id 77", None), now)
    assert store.begin_step("test-worker", generation, unsettled, now,
                            "at-most-once").action == "run"
    assert store.release("test-worker", generation, now)
    successor = store.acquire("test-worker-2", now + 1, 60)
    assert successor is not None
    assert store.begin_step("test-worker-2", successor, unsettled, now + 1,
                            "at-most-once").action == "uncertain"
    assert store.release("test-worker-2", successor, now + 1)
    return done, unsettled
