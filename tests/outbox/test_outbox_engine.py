"""Rule 7 at the engine: claim, settle and resolve, their fences and the gap."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentbox.errors import BadInput, NotAsAsked
from agentbox.ledger.store import Store
from agentbox.rules.outbox import CLAIM_GRACE, SEPARATOR, Dispatch, Wait
from support.clock import T0

Queue = Callable[..., None]

GAP = 3600
TIMEOUT = 60
DEADLINE = TIMEOUT + CLAIM_GRACE  # a claim made at t is abandoned after t + DEADLINE


def claim(store: Store, now: int, mode: str = "at-least-once",
          gap: int = GAP) -> Dispatch | Wait:
    return store.claim_dispatch(now, mode, gap, TIMEOUT)


def claimed(store: Store, now: int, mode: str = "at-least-once",
            gap: int = GAP) -> Dispatch:
    found = claim(store, now, mode, gap)
    assert isinstance(found, Dispatch), found
    return found


def waited(store: Store, now: int, mode: str = "at-least-once") -> Wait:
    found = claim(store, now, mode)
    assert isinstance(found, Wait), found
    return found


def states(store: Store) -> dict[int, str]:
    return {m.id: m.state for m in store.outbox(("held", "sending", "sent", "uncertain"))}


def test_held_messages_go_out_merged_in_order(store: Store, queue: Queue) -> None:
    queue(T0, "one", "two")
    queue(T0, "three")
    dispatch = claimed(store, T0)
    assert dispatch.body == SEPARATOR.join(["one", "two", "three"])
    assert dispatch.message_ids == (1, 2, 3)
    assert (dispatch.tries, dispatch.deadline, dispatch.mode) == (1, T0 + DEADLINE,
                                                                 "at-least-once")
    assert set(states(store).values()) == {"sending"}
    assert store.settle_dispatch(dispatch.key, "sent", T0, attempt=1)
    assert set(states(store).values()) == {"sent"}
    assert store.status().outbox == {"held": 0, "sending": 0, "sent": 3, "uncertain": 0}


def test_nothing_held_is_a_wait_without_a_time(store: Store) -> None:
    assert waited(store, T0) == Wait(0, None)


def test_the_article_case_three_updates_inside_an_hour(store: Store,
                                                         queue: Queue) -> None:
    sends: list[str] = []
    for minute in (0, 10, 20):
        queue(T0 + minute * 60, f"update {minute // 10}")
        found = claim(store, T0 + minute * 60)
        if isinstance(found, Dispatch):
            sends.append(found.body)
            store.settle_dispatch(found.key, "sent", T0 + minute * 60, attempt=found.tries)
    found = claimed(store, T0 + 61 * 60)
    sends.append(found.body)
    assert sends == ["update 0", "update 1\n\nupdate 2"]


def test_gap_counts_from_the_last_send(store: Store, queue: Queue) -> None:
    queue(T0, "first")
    first = claimed(store, T0)
    store.settle_dispatch(first.key, "sent", T0 + 5, attempt=1)
    queue(T0 + 10, "second")
    assert waited(store, T0 + GAP - 1) == Wait(1, T0 + GAP, reason="gap")
    assert claimed(store, T0 + GAP).body == "second"


def test_an_urgent_send_resets_the_gap_and_takes_the_held_ones(store: Store,
                                                                queue: Queue) -> None:
    queue(T0, "first")
    first = claimed(store, T0)
    store.settle_dispatch(first.key, "sent", T0, attempt=1)
    queue(T0 + 60, "routine")
    queue(T0 + 100, "fire!", urgent=True)
    urgent = claimed(store, T0 + 100)
    assert urgent.urgent
    assert urgent.body == "routine\n\nfire!"
    store.settle_dispatch(urgent.key, "sent", T0 + 100, attempt=1)
    queue(T0 + 200, "later")
    # A send of any kind restarts the gap: the urgent one at T0+100, not T0.
    assert waited(store, T0 + GAP).until == T0 + 100 + GAP
    assert claimed(store, T0 + 100 + GAP).body == "later"


def test_failed_sends_do_not_count_toward_the_gap(store: Store, queue: Queue) -> None:
    queue(T0, "first")
    first = claimed(store, T0)
    store.settle_dispatch(first.key, "sent", T0, attempt=1)
    queue(T0 + 10, "second")
    failing = claimed(store, T0 + GAP)
    assert store.settle_dispatch(failing.key, "failed", T0 + GAP, "exit 1", attempt=1)
    [held] = store.outbox()
    assert (held.state, held.error, held.dispatch_key) == ("held", "exit 1", None)
    retry = claimed(store, T0 + GAP + 1)
    assert retry.body == "second"
    assert retry.key != failing.key
    store.settle_dispatch(retry.key, "sent", T0 + GAP + 1, attempt=1)
    assert store.outbox(("sent",))[-1].error is None


def test_a_failure_before_any_send_leaves_the_next_dispatch_free(store: Store,
                                                                  queue: Queue) -> None:
    queue(T0, "only")
    failing = claimed(store, T0)
    store.settle_dispatch(failing.key, "failed", T0, "exit 2", attempt=1)
    assert claimed(store, T0 + 1).body == "only"


def test_settle_twice_changes_nothing_the_second_time(store: Store,
                                                       queue: Queue) -> None:
    queue(T0, "once")
    dispatch = claimed(store, T0)
    assert store.settle_dispatch(dispatch.key, "sent", T0, attempt=1)
    assert not store.settle_dispatch(dispatch.key, "failed", T0 + 1, "late", attempt=1)
    assert not store.settle_dispatch(dispatch.key, "sent", T0 + 1, attempt=1)
    [message] = store.outbox(("sent",))
    assert (message.state, message.sent_at, message.error) == ("sent", T0, None)
    assert not store.settle_dispatch("no-such-key", "sent", T0, attempt=1)


def test_a_failed_dispatch_cannot_be_settled_again(store: Store, queue: Queue) -> None:
    queue(T0, "once")
    dispatch = claimed(store, T0)
    assert store.settle_dispatch(dispatch.key, "failed", T0, "exit 1", attempt=1)
    # The rows are held (and may already be in a new dispatch): a late word is refused.
    assert not store.settle_dispatch(dispatch.key, "sent", T0 + 1, attempt=1)
    assert states(store) == {1: "held"}


def test_at_least_once_unknown_waits_for_the_deadline_then_resends(
        store: Store, queue: Queue) -> None:
    queue(T0, "maybe")
    first = claimed(store, T0)
    assert store.settle_dispatch(first.key, "unknown", T0 + 60, "timed out", attempt=1)
    [row] = store.outbox()
    assert (row.state, row.error) == ("sending", "timed out")
    queue(T0 + 70, "newer", urgent=True)
    # Not before the deadline, even for an urgent message: the claim is in flight
    # and counts as the last send; the urgent one goes on its own.
    urgent = claimed(store, T0 + 70)
    assert urgent.body == "newer"
    store.settle_dispatch(urgent.key, "sent", T0 + 70, attempt=1)
    assert waited(store, T0 + DEADLINE) == Wait(0, T0 + 70 + GAP, 1, T0 + DEADLINE)
    again = claimed(store, T0 + DEADLINE + 1)
    assert (again.key, again.body, again.message_ids) == (first.key, "maybe", (1,))
    assert (again.tries, again.deadline) == (2, T0 + DEADLINE + 1 + DEADLINE)
    assert again.resend
    assert store.settle_dispatch(again.key, "sent", T0 + DEADLINE + 2, attempt=2)
    assert states(store) == {1: "sent", 2: "sent"}
    assert waited(store, T0 + 2 * DEADLINE + 10).in_flight == 0


def test_a_resend_ignores_the_gap(store: Store, queue: Queue) -> None:
    queue(T0, "maybe")
    first = claimed(store, T0, gap=10 * GAP)
    later = T0 + DEADLINE + 1
    again = claimed(store, later, gap=10 * GAP)
    assert again.key == first.key
    assert not isinstance(claim(store, later + 1, gap=10 * GAP), Dispatch)


def test_rows_held_after_a_claim_do_not_join_its_resend(store: Store,
                                                        queue: Queue) -> None:
    queue(T0, "a")
    first = claimed(store, T0)
    queue(T0 + 10, "b")
    again = claimed(store, T0 + DEADLINE + 1)
    assert (again.key, again.body) == (first.key, "a")
    assert states(store) == {1: "sending", 2: "held"}


def test_settle_after_another_dispatcher_took_over_is_refused(store: Store,
                                                              queue: Queue) -> None:
    queue(T0, "contested")
    stale = claimed(store, T0)
    fresh = claimed(store, T0 + DEADLINE + 1)
    assert fresh.key == stale.key and fresh.tries == 2
    # The first dispatcher comes back: neither its failure nor its doubt may undo try 2.
    assert not store.settle_dispatch(stale.key, "failed", T0 + DEADLINE + 2, "x", attempt=1)
    assert not store.settle_dispatch(stale.key, "unknown", T0 + DEADLINE + 2, "y", attempt=1)
    [row] = store.outbox()
    assert (row.state, row.error, row.dispatch_key) == ("sending", None, stale.key)
    assert store.settle_dispatch(fresh.key, "sent", T0 + DEADLINE + 3, attempt=2)
    assert states(store) == {1: "sent"}


def test_a_late_sent_from_an_overtaken_try_still_counts(store: Store,
                                                        queue: Queue) -> None:
    queue(T0, "delivered late")
    stale = claimed(store, T0)
    fresh = claimed(store, T0 + DEADLINE + 1)
    assert store.settle_dispatch(stale.key, "sent", T0 + DEADLINE + 2, attempt=1)
    assert states(store) == {1: "sent"}
    assert not store.settle_dispatch(fresh.key, "failed", T0 + DEADLINE + 3, "x",
                                     attempt=fresh.tries)
    assert states(store) == {1: "sent"}


def test_at_most_once_unknown_is_uncertain_and_never_resent(store: Store,
                                                            queue: Queue) -> None:
    queue(T0, "careful")
    dispatch = claimed(store, T0, "at-most-once")
    assert store.settle_dispatch(dispatch.key, "unknown", T0 + 60, "timed out", attempt=1)
    [row] = store.outbox()
    assert (row.state, row.error, row.dispatch_key) == ("uncertain", "timed out",
                                                        dispatch.key)
    for later in (T0 + DEADLINE + 1, T0 + 10 * GAP):
        assert waited(store, later, "at-least-once").held == 0
    assert states(store) == {1: "uncertain"}


def test_an_expired_at_most_once_claim_becomes_uncertain(store: Store,
                                                         queue: Queue) -> None:
    queue(T0, "careful")
    dispatch = claimed(store, T0, "at-most-once")
    assert waited(store, T0 + DEADLINE).in_flight == 1
    assert states(store) == {1: "sending"}
    # The mode is the claim's: a dispatcher in the other mode does not resend it.
    found = waited(store, T0 + DEADLINE + 1, "at-least-once")
    assert found.in_flight == 0
    assert states(store) == {1: "uncertain"}
    # It may have been delivered, so it counts toward the gap.
    queue(T0 + 100, "next")
    assert waited(store, T0 + 200).until == T0 + GAP
    assert store.settle_dispatch(dispatch.key, "unknown", T0 + 300, "late", attempt=1) is False


def test_an_expired_at_least_once_claim_is_resent_by_an_at_most_once_dispatcher(
        store: Store, queue: Queue) -> None:
    queue(T0, "retry me")
    first = claimed(store, T0, "at-least-once")
    again = claimed(store, T0 + DEADLINE + 1, "at-most-once")
    assert (again.key, again.mode, again.tries) == (first.key, "at-least-once", 2)


def test_several_expired_claims_resend_one_at_a_time(store: Store,
                                                     queue: Queue) -> None:
    queue(T0, "a")
    first = claimed(store, T0)
    queue(T0 + 1, "b", urgent=True)
    second = claimed(store, T0 + 1)
    later = T0 + DEADLINE + 10
    assert claimed(store, later).key == first.key
    assert claimed(store, later).key == second.key
    assert waited(store, later).in_flight == 2


def test_resolve_unsent_holds_the_rows_again(store: Store, queue: Queue) -> None:
    queue(T0, "a", "b")
    dispatch = claimed(store, T0, "at-most-once")
    store.settle_dispatch(dispatch.key, "unknown", T0 + 60, "killed", attempt=1)
    assert store.resolve_dispatch(dispatch.key, False, T0 + 100) == 2
    rows = store.outbox()
    assert [(r.state, r.dispatch_key) for r in rows] == [("held", None), ("held", None)]
    # An unsent dispatch does not count toward the gap; the rows go under a new key.
    again = claimed(store, T0 + 101, "at-most-once")
    assert again.key != dispatch.key and again.body == "a\n\nb"
    with pytest.raises(NotAsAsked):
        store.resolve_dispatch(dispatch.key, True, T0 + 102)


def test_resolve_sent_marks_the_rows_sent_when_they_were_claimed(store: Store,
                                                                 queue: Queue) -> None:
    queue(T0, "a")
    dispatch = claimed(store, T0 + 5, "at-most-once")
    store.settle_dispatch(dispatch.key, "unknown", T0 + 60, "killed", attempt=1)
    assert store.resolve_dispatch(dispatch.key, True, T0 + 500) == 1
    [row] = store.outbox(("sent",))
    assert (row.state, row.sent_at, row.error) == ("sent", T0 + 5, None)
    assert store.status().outbox["uncertain"] == 0


def test_resolve_refuses_what_is_not_uncertain(store: Store, queue: Queue) -> None:
    with pytest.raises(BadInput):
        store.resolve_dispatch("nope", True, T0)
    queue(T0, "a")
    dispatch = claimed(store, T0)
    with pytest.raises(NotAsAsked, match="sending"):
        store.resolve_dispatch(dispatch.key, True, T0 + 1)
    store.settle_dispatch(dispatch.key, "sent", T0 + 1, attempt=1)
    with pytest.raises(NotAsAsked, match="sent"):
        store.resolve_dispatch(dispatch.key, False, T0 + 2)
    assert states(store) == {1: "sent"}


def test_resolve_first_parks_an_expired_at_most_once_claim(store: Store,
                                                           queue: Queue) -> None:
    queue(T0, "a")
    dispatch = claimed(store, T0, "at-most-once")
    # The dispatcher died; no dispatch has run since, the operator resolves directly.
    assert store.resolve_dispatch(dispatch.key, False, T0 + DEADLINE + 1) == 1
    assert states(store) == {1: "held"}


def test_a_late_sent_settles_an_uncertain_dispatch(store: Store, queue: Queue) -> None:
    queue(T0, "a")
    dispatch = claimed(store, T0, "at-most-once")
    waited(store, T0 + DEADLINE + 1)
    assert states(store) == {1: "uncertain"}
    assert not store.settle_dispatch(dispatch.key, "failed", T0 + DEADLINE + 2, "x", attempt=1)
    assert states(store) == {1: "uncertain"}
    assert store.settle_dispatch(dispatch.key, "sent", T0 + DEADLINE + 2, attempt=1)
    assert states(store) == {1: "sent"}


def test_bad_arguments_are_refused(store: Store, queue: Queue) -> None:
    queue(T0, "a")
    with pytest.raises(BadInput):
        store.claim_dispatch(T0, "exactly-once", GAP, TIMEOUT)
    with pytest.raises(BadInput):
        store.claim_dispatch(T0, "at-most-once", GAP, 0)
    dispatch = claimed(store, T0)
    with pytest.raises(BadInput):
        store.settle_dispatch(dispatch.key, "maybe", T0, attempt=1)  # type: ignore[arg-type]
    assert states(store) == {1: "sending"}


def test_history_tells_the_story_of_a_resent_dispatch(store: Store,
                                                      queue: Queue) -> None:
    queue(T0, "a")
    dispatch = claimed(store, T0)
    store.settle_dispatch(dispatch.key, "unknown", T0 + 60, "timed out", attempt=1)
    claimed(store, T0 + DEADLINE + 1)
    store.settle_dispatch(dispatch.key, "sent", T0 + DEADLINE + 2, attempt=2)
    actions = [e.action for e in store.history("dispatch", dispatch.key)]
    assert actions == ["claimed", "unknown", "resending", "sent"]
    message = [e.action for e in store.history("message", 1)]
    assert message == ["queued", "sending", "resending", "sent"]


def test_listing_past_its_limit_shows_the_newest(store: Store, queue: Queue) -> None:
    queue(T0, *(f"m{n}" for n in range(5)))
    assert [m.body for m in store.outbox(limit=2)] == ["m3", "m4"]
