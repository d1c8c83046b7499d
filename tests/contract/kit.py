"""Helpers for the contract suite, written against the Store interface alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentbox.rules.answer import Answer, Message
from agentbox.rules.policy import Policy
from agentbox.rules.records import Event
from agentbox.store import Store

T = 1_000_000
TTL = 120
POLICY = Policy(lease_ttl=TTL)
ALL_OUTBOX = ("held", "sending", "sent", "uncertain")


def snapshot(store: Store, ids: Sequence[int] = ()) -> dict[str, Any]:
    """All a caller can see through the interface; equal snapshots = nothing changed."""
    events = {i: store.event(i) for i in ids}
    return {
        "status": store.status(),
        "events": events,
        "stories": {i: store.story(i) for i in ids},
        "dead": store.dead(),
        "outbox": store.outbox(ALL_OUTBOX),
        "timers": store.timers(include_done=True),
        "approvals": store.approvals(T),
    }


def run(store: Store, holder: str, now: int, answer: Answer | None = None,
        policy: Policy = POLICY) -> tuple[int, list[Event]]:
    """One whole run: acquire, claim, finish, release. Returns (generation, batch)."""
    generation = store.acquire(holder, now, policy.lease_ttl)
    assert generation is not None
    batch = store.claim(holder, generation, now, policy)
    assert batch is not None
    assert store.finish(holder, generation, now, [e.id for e in batch], answer)
    assert store.release(holder, generation, now)
    return generation, batch


def say(store: Store, now: int, *bodies: str, urgent: bool = False) -> None:
    """Queue messages the only way there is: as the answer of a finished run."""
    run(store, f"speaker-{now}-{len(bodies)}", now,
        Answer(messages=tuple(Message(b, urgent) for b in bodies)))


def states(store: Store) -> list[str]:
    return [m.state for m in store.outbox(ALL_OUTBOX)]
