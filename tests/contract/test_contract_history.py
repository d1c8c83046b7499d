"""Store contract: the story of a message, a dispatch and an approval, line by line,
and what an ingest names back for a key it already knows."""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.outbox import Dispatch
from agentbox.rules.policy import DAY, Policy
from agentbox.rules.records import Entry, IngestResult
from support.clock import T0, TTL
from support.store import run, say


def test_a_message_and_its_dispatch_tell_every_line_whole(backend: Store) -> None:
    backend.ingest("hook", "1", "{}", T0)
    generation, _ = run(backend, "writer", T0)
    say(backend, T0 + 1, "hello")
    [message] = backend.outbox()
    assert backend.history("message", message.id) == [
        Entry(T0 + 1, "message", str(message.id), "queued", generation + 1, None)]
    dispatch = backend.claim_dispatch(T0 + 2, "at-least-once", 0, 30)
    assert isinstance(dispatch, Dispatch)
    assert backend.settle_dispatch(dispatch.key, "failed", T0 + 3, "boom", attempt=1)
    assert backend.history("dispatch", dispatch.key) == [
        Entry(T0 + 2, "dispatch", dispatch.key, "claimed", None, "1 message(s), at-least-once"),
        Entry(T0 + 3, "dispatch", dispatch.key, "failed", None, "boom")]


def test_an_approval_tells_its_request_and_its_answer(backend: Store) -> None:
    assert backend.request_approval("ap1", T0, 60, "deploy")
    assert backend.answer_approval("ap1", "yes", T0 + 5) == "yes"
    assert backend.history("approval", "ap1") == [
        Entry(T0, "approval", "ap1", "requested", None, "deploy"),
        Entry(T0 + 5, "approval", "ap1", "answered", None, "yes -> yes")]


def test_an_answer_to_an_approval_never_requested_is_unknown(backend: Store) -> None:
    assert backend.answer_approval("nobody-asked", "yes", T0) == "unknown"
    assert backend.history("approval", "nobody-asked") == []


def test_a_known_key_is_named_back_whole(backend: Store) -> None:
    stored = backend.ingest("hook", "k1", '{"n":1}', T0)
    assert backend.ingest("hook", "k1", '{"n":1}', T0 + 1) == IngestResult(
        "duplicate", stored.id, "hook", "k1")
    assert backend.ingest("hook", "k1", '{"n":2}', T0 + 1) == IngestResult(
        "conflict", stored.id, "hook", "k1")


def test_a_pruned_key_is_named_back_whole(backend: Store) -> None:
    from agentbox import upkeep

    keep = 30 * DAY
    policy = Policy(lease_ttl=TTL, keep_done=keep, dedupe_window=90 * DAY)
    first = backend.ingest("hook", "k1", '{"n":1}', T0)
    backend.ingest("hook", "k2", "{}", T0)
    run(backend, "finisher", T0, policy=policy)
    later = T0 + keep + 1
    assert upkeep.prune(backend, later, policy, sleep=lambda _: None).complete
    assert backend.event(first.id) is None
    assert backend.ingest("hook", "k1", '{"n":1}', later) == IngestResult(
        "duplicate", first.id, "hook", "k1")
    assert backend.ingest("hook", "k1", '{"n":9}', later) == IngestResult(
        "conflict", first.id, "hook", "k1")


def test_events_lists_the_newest_hundred_unless_told(backend: Store) -> None:
    results = backend.ingest_many([("hook", str(n), "{}") for n in range(101)], T0)
    listed = backend.events()
    assert len(listed) == 100
    assert {e.id for e in listed} == {r.id for r in results[1:]}
