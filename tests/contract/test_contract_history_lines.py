"""Store contract: every history line of a dispatch, its messages, a timer and the state,
word for word, as ``history(subject, id)`` reads them back.

The lines are what an operator (and ``agentbox export``) reads of what happened: each
subject, id, action and detail is part of the contract, on every backend.
"""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.outbox import Dispatch, Wait
from agentbox.rules.records import Entry
from agentbox.rules.timers import TimerSpec
from support.clock import T0, TTL
from support.store import POLICY, say


def _claim(store: Store, now: int, mode: str, max_tries: int = 5) -> Dispatch:
    claimed = store.claim_dispatch(now, mode, 0, 30, max_tries=max_tries)
    assert isinstance(claimed, Dispatch), claimed
    return claimed


def _lines(store: Store, subject: str, subject_id: object) -> list[tuple[object, ...]]:
    return [(e.at, e.subject, e.subject_id, e.action, e.generation, e.detail)
            for e in store.history(subject, subject_id)]


def test_an_uncertain_dispatch_resolved_unsent_then_sent_tells_each_step(
        backend: Store) -> None:
    say(backend, T0, "one")
    first = _claim(backend, T0 + 1, "at-most-once")
    assert backend.settle_dispatch(first.key, "unknown", T0 + 2, "timed out", attempt=1)
    assert backend.resolve_dispatch(first.key, False, T0 + 3) == 1
    second = _claim(backend, T0 + 4, "at-most-once")
    assert backend.settle_dispatch(second.key, "unknown", T0 + 5, "lost", attempt=1)
    assert backend.resolve_dispatch(second.key, True, T0 + 6) == 1
    assert _lines(backend, "dispatch", first.key) == [
        (T0 + 1, "dispatch", first.key, "claimed", None, "1 message(s), at-most-once"),
        (T0 + 2, "dispatch", first.key, "uncertain", None, "timed out"),
        (T0 + 3, "dispatch", first.key, "resolved", None, "unsent")]
    assert _lines(backend, "dispatch", second.key)[1:] == [
        (T0 + 5, "dispatch", second.key, "uncertain", None, "lost"),
        (T0 + 6, "dispatch", second.key, "resolved", None, "sent")]
    [message] = first.message_ids
    assert _lines(backend, "message", message)[1:] == [
        (T0 + 1, "message", str(message), "sending", None, first.key),
        (T0 + 2, "message", str(message), "uncertain", None, first.key),
        (T0 + 3, "message", str(message), "held again", None, f"resolved unsent: {first.key}"),
        (T0 + 4, "message", str(message), "sending", None, second.key),
        (T0 + 5, "message", str(message), "uncertain", None, second.key),
        (T0 + 6, "message", str(message), "sent", None, f"resolved sent: {second.key}")]


def test_an_at_least_once_key_unknown_resent_failed_and_parked_tells_each_try(
        backend: Store) -> None:
    say(backend, T0, "two")
    claimed = _claim(backend, T0 + 1, "at-least-once", max_tries=3)
    key = claimed.key
    assert backend.settle_dispatch(key, "unknown", T0 + 2, "no word", attempt=1)
    assert _claim(backend, T0 + 62, "at-least-once", max_tries=3).tries == 2
    assert backend.settle_dispatch(key, "failed", T0 + 63, "503", attempt=2)
    assert isinstance(backend.claim_dispatch(T0 + 100, "at-least-once", 0, 30), Wait)
    assert _claim(backend, T0 + 200, "at-least-once", max_tries=3).tries == 3
    assert backend.settle_dispatch(key, "failed", T0 + 201, "503 again", attempt=3)
    assert _lines(backend, "dispatch", key) == [
        (T0 + 1, "dispatch", key, "claimed", None, "1 message(s), at-least-once"),
        (T0 + 2, "dispatch", key, "unknown", None, "no word"),
        (T0 + 62, "dispatch", key, "resending", None, "try 2 of 3 under the same key"),
        (T0 + 63, "dispatch", key, "failed", None,
         "try 2 of 3: 503; kept under the same key, which may have delivered already"),
        (T0 + 200, "dispatch", key, "resending", None, "try 3 of 3 under the same key"),
        (T0 + 201, "dispatch", key, "uncertain", None, "503 again (try 3 of 3: no more tries)")]
    [message] = claimed.message_ids
    assert _lines(backend, "message", message)[1:] == [
        (T0 + 1, "message", str(message), "sending", None, key),
        (T0 + 62, "message", str(message), "resending", None, key),
        (T0 + 200, "message", str(message), "resending", None, key),
        (T0 + 201, "message", str(message), "uncertain", None, key)]


def test_a_failed_first_try_holds_its_messages_again_with_the_senders_word(
        backend: Store) -> None:
    say(backend, T0, "three")
    claimed = _claim(backend, T0 + 1, "at-least-once")
    assert backend.settle_dispatch(claimed.key, "failed", T0 + 2, "refused", attempt=1)
    assert _lines(backend, "dispatch", claimed.key)[1:] == [
        (T0 + 2, "dispatch", claimed.key, "failed", None, "refused")]
    [message] = claimed.message_ids
    assert _lines(backend, "message", message) == [
        (T0, "message", str(message), "queued", 1, None),
        (T0 + 1, "message", str(message), "sending", None, claimed.key),
        (T0 + 2, "message", str(message), "held again", None, "refused")]


def test_a_timer_tells_its_adding_replacing_firing_and_removal(backend: Store) -> None:
    assert backend.add_timer(TimerSpec(name="t", due=T0 + 5, every=60), T0) == "added"
    assert backend.add_timer(TimerSpec(name="t", due=T0 + 6, every=60), T0 + 1,
                             replace=True) == "replaced"
    assert backend.tick(T0 + 70) == 1
    [event] = backend.timer_events("t")
    assert backend.remove_timer("t", T0 + 80)
    assert backend.history("timer", "t") == [
        Entry(T0, "timer", "t", "added", None, f"due {T0 + 5}"),
        Entry(T0 + 1, "timer", "t", "replaced", None, f"due {T0 + 6}"),
        Entry(T0 + 70, "timer", "t", "fired", None,
              f"scheduled for {T0 + 66}, skipped 1: event {event.id} stored"),
        Entry(T0 + 80, "timer", "t", "removed", None, None)]


def test_an_operators_state_is_told_with_its_version_and_lease(backend: Store) -> None:
    generation = backend.acquire("operator", T0, TTL)
    assert generation is not None
    version = backend.set_state("operator", generation, T0 + 1, {"a": 1}, POLICY)
    assert version == 1
    assert backend.history("state", version) == [
        Entry(T0 + 1, "state", "1", "set", generation, "by an operator")]


def test_a_send_and_a_late_word_of_an_earlier_try_tell_which_try_delivered(
        backend: Store) -> None:
    say(backend, T0, "four")
    sent = _claim(backend, T0 + 1, "at-least-once")
    assert backend.settle_dispatch(sent.key, "sent", T0 + 2, attempt=1)
    say(backend, T0 + 10, "five")
    late = _claim(backend, T0 + 11, "at-least-once")
    assert backend.settle_dispatch(late.key, "unknown", T0 + 12, "no word", attempt=1)
    assert _claim(backend, T0 + 72, "at-least-once").tries == 2
    assert backend.settle_dispatch(late.key, "sent", T0 + 73, attempt=1)  # try 1 did
    assert _lines(backend, "dispatch", sent.key)[1:] == [
        (T0 + 2, "dispatch", sent.key, "sent", None, None)]
    assert _lines(backend, "dispatch", late.key)[-1] == (
        T0 + 73, "dispatch", late.key, "sent", None, "late word from try 1")
    for claimed, at in ((sent, T0 + 2), (late, T0 + 73)):
        [message] = claimed.message_ids
        assert _lines(backend, "message", message)[-1] == (
            at, "message", str(message), "sent", None, claimed.key)
