"""Finishing behind the fence, and failing: a refused write changes nothing at all."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentbox.ledger import outbox
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.store import POLICY, MakeStepWorker, StepWorker, actions, event_state, every_row

LATER = TTL + 1
REPLY = Answer(messages=(Message("report sent"),))


def claimed(worker: StepWorker, now: int, *source_ids: str) -> StepWorker:
    for source_id in source_ids:
        worker.store.ingest("chat", source_id, "{}", now)
    assert worker.acquire(now) is not None
    assert worker.claim(now)
    return worker


def assert_refused_unchanged(store: Store, holder: str, generation: int, now: int,
                             ids: Sequence[int]) -> None:
    before = every_row(store)
    assert not store.finish(holder, generation, now, ids, REPLY)
    assert every_row(store) == before
    assert not store.fail(holder, generation, now, ids, "late error", POLICY)
    assert every_row(store) == before


def test_finish_marks_the_batch_done_and_queues_its_messages(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1", "m2")
    assert a.finish(T0 + 5, REPLY)
    for event in a.batch:
        done = store.event(event.id)
        assert done is not None
        assert (done.status, done.attempts, done.error, done.updated_at) == ("done", 1, None,
                                                                             T0 + 5)
        entry = store.story(event.id)[-1]
        assert (entry.action, entry.generation, entry.at) == ("finished", 1, T0 + 5)
    [message] = store.outbox()
    assert (message.body, message.state, message.created_at) == ("report sent", "held", T0 + 5)


def test_a_finish_from_a_stale_generation_is_refused(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1")
    b = worker("B")
    b.acquire(T0 + LATER)
    b.claim(T0 + LATER)  # the same row, now under generation 2
    ids = [e.id for e in a.batch]
    assert_refused_unchanged(store, "A", 1, T0 + LATER, ids)
    assert_refused_unchanged(store, "B", 1, T0 + LATER, ids)  # right holder would not help
    assert b.finish(T0 + LATER, REPLY)
    assert event_state(store, "m1") == ("done", 2)
    assert len(store.outbox()) == 1


def test_a_finish_by_the_wrong_holder_is_refused(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1")
    assert_refused_unchanged(store, "B", 1, T0 + 1, [e.id for e in a.batch])
    assert a.finish(T0 + 1)


def test_a_finish_after_the_lease_lapsed_is_refused_even_with_nobody_else(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1")
    ids = [e.id for e in a.batch]
    assert_refused_unchanged(store, "A", 1, T0 + LATER, ids)
    assert a.finish(T0 + TTL)  # the last second of the lease still counts


def test_a_finish_for_rows_not_running_under_this_claim_is_refused_whole(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1", "m2")
    first, second = (e.id for e in a.batch)
    store.ingest("chat", "never-claimed", "{}", T0)
    pending = store.find("chat", "never-claimed")
    assert pending is not None
    for bad in (pending.id, 9999):
        assert_refused_unchanged(store, "A", 1, T0 + 1, [first, bad])
    a.batch = a.batch[:1]
    assert a.finish(T0 + 1)
    assert_refused_unchanged(store, "A", 1, T0 + 2, [first])          # already done
    assert_refused_unchanged(store, "A", 1, T0 + 2, [first, second])  # one of them done
    assert store.finish("A", 1, T0 + 2, [second, second])             # repeats are one id
    assert event_state(store, "m2") == ("done", 1)


def test_messages_are_queued_in_the_same_transaction_as_the_finish(
        store: Store, worker: MakeStepWorker, monkeypatch: pytest.MonkeyPatch) -> None:
    a = claimed(worker("A"), T0, "m1")
    before = every_row(store)
    original = outbox.queue_in

    def queue_then_crash(*args: object, **kwargs: object) -> list[int]:
        original(*args, **kwargs)  # type: ignore[arg-type]
        raise RuntimeError("crash between the queue and the commit")

    monkeypatch.setattr(outbox, "queue_in", queue_then_crash)
    with pytest.raises(RuntimeError):
        a.finish(T0 + 1, REPLY)
    assert every_row(store) == before  # neither done nor queued
    monkeypatch.undo()
    assert a.finish(T0 + 1, REPLY)
    assert event_state(store, "m1") == ("done", 1)
    assert [m.body for m in store.outbox()] == ["report sent"]


def test_fail_returns_the_batch_to_pending_with_its_error_and_backoff(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A", Policy(retry_backoff=60)), T0, "m1", "m2")
    assert a.fail(T0 + 3, "handler exited 1: boom")
    for event in a.batch:
        back = store.event(event.id)
        assert back is not None
        assert (back.status, back.attempts, back.error, back.available_at) == (
            "pending", 1, "handler exited 1: boom", T0 + 3 + 60)
        entry = store.story(event.id)[-1]
        assert (entry.action, entry.generation, entry.detail) == ("failed", 1,
                                                                  "handler exited 1: boom")


def test_a_failure_on_the_last_attempt_is_dead_at_once(
        store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A", Policy(max_attempts=2)), T0, "m1")
    assert a.fail(T0)
    a.claim(T0)
    assert a.fail(T0 + 1, "still broken")
    event = store.find("chat", "m1")
    assert event is not None
    assert (event.status, event.attempts, event.error) == ("dead", 2, "still broken")
    assert actions(store, event.id)[-2:] == ["failed", "dead"]
    assert store.story(event.id)[-1].detail == "failed on its last attempt (2 of 2)"


def test_a_later_success_clears_the_error(store: Store, worker: MakeStepWorker) -> None:
    a = claimed(worker("A"), T0, "m1")
    a.fail(T0)
    a.claim(T0 + 1)
    assert a.finish(T0 + 1)
    event = store.find("chat", "m1")
    assert event is not None and (event.status, event.error) == ("done", None)


def test_an_empty_finish_still_queues_a_runs_messages(store: Store) -> None:
    """A run with no events may still speak, behind the same fence."""
    assert store.acquire("A", T0, TTL) == 1
    assert store.finish("A", 1, T0, [], REPLY)
    assert [m.body for m in store.outbox()] == ["report sent"]
    assert not store.finish("B", 1, T0, [], REPLY)
    assert len(store.outbox()) == 1


def test_a_finish_in_an_inbox_that_never_failed_writes_no_pause_row(store: Store) -> None:
    """The breaker's row is written when a run fails, not by every finish: a finished
    run with no streak to end and no breaker to close only reads that it has none."""
    from support.store import run

    store.ingest("s", "1", "{}", T0)
    run(store, "w", T0)
    rows = every_row(store)
    assert isinstance(rows, dict) and rows["pauses"] == []
