"""Store contract: what an approval request, its answer and its expiry leave behind."""

from __future__ import annotations

import json

import pytest

from agentbox.errors import BadInput, NotAsAsked
from agentbox.ledger.store import Store
from agentbox.rules.approvals import Approval
from agentbox.rules.timers import TimerSpec
from support.clock import T0
from support.store import plant

H = 3_600


def outcome_event(store: Store, request_id: str) -> dict[str, object]:
    """The payload of the one event under the approval's key, as a handler reads it."""
    event = store.find("approval", request_id)
    assert event is not None, f"no outcome event for {request_id}"
    return dict(json.loads(event.payload))


def test_the_expiry_timer_is_due_when_the_request_expires(backend: Store) -> None:
    assert backend.request_approval("refund-1", T0, 4 * H, "refund order 1")
    [timer] = backend.timers()
    assert (timer.name, timer.due, timer.every, timer.done) == (
        "expire:refund-1", T0 + 4 * H, None, False)
    assert backend.tick(T0) == 0 and backend.tick(T0 + 4 * H - 1) == 0
    assert backend.find("approval", "refund-1") is None
    assert backend.tick(T0 + 4 * H) == 1
    [spent] = backend.timers(include_done=True)
    assert spent.done


def test_an_expiry_tells_the_handler_which_request_and_action(backend: Store) -> None:
    backend.request_approval("refund-1", T0, H, "refund order 1")
    backend.tick(T0 + H)
    assert outcome_event(backend, "refund-1") == {
        "approval": "refund-1", "answer": "expired", "action": "refund order 1",
        "timer": "expire:refund-1", "scheduled_for": T0 + H, "late_by": 0, "skipped": 0}
    assert backend.answer_approval("refund-1", "yes", T0 + H + 1) == "expired"


def test_an_answer_tells_the_handler_which_request_and_action(backend: Store) -> None:
    backend.request_approval("refund-2", T0, H, "refund order 2")
    assert backend.answer_approval("refund-2", "no", T0 + 10) == "no"
    assert outcome_event(backend, "refund-2") == {
        "approval": "refund-2", "answer": "no", "action": "refund order 2"}


def test_an_id_fits_its_expiry_timer_s_name(backend: Store) -> None:
    """193 characters and "expire:" make the longest timer name, 200; one more is refused
    before anything is stored, not half-way through by the timer's own check."""
    with pytest.raises(BadInput) as refused:
        backend.request_approval("r" * 194, T0, H, "refund")
    assert str(refused.value) == ("an approval id is at most 193 characters: its expiry timer "
                                  "is named expire:ID, of at most 200")
    assert backend.approvals(T0) == [] and backend.timers() == []
    assert backend.request_approval("r" * 193, T0, H, "refund")
    assert [t.name for t in backend.timers()] == ["expire:" + "r" * 193]


def test_an_expiry_must_be_at_least_a_second_away(backend: Store) -> None:
    for seconds in (0, -5):
        with pytest.raises(BadInput) as refused:
            backend.request_approval("refund-1", T0, seconds, "refund")
        assert str(refused.value) == (
            "an approval must expire a positive number of seconds from now")
    assert backend.approvals(T0) == [] and backend.timers() == []
    assert backend.request_approval("refund-1", T0, 1, "refund")
    assert [a.outcome for a in backend.approvals(T0)] == ["pending"]
    assert [a.outcome for a in backend.approvals(T0 + 1)] == ["expired"]


def test_a_reply_is_yes_or_no(backend: Store) -> None:
    backend.request_approval("refund-1", T0, H, "refund")
    with pytest.raises(BadInput) as refused:
        backend.answer_approval("refund-1", "maybe", T0)
    assert str(refused.value) == "an answer is yes or no, not 'maybe'"
    assert backend.find("approval", "refund-1") is None


@pytest.mark.parametrize("payload", ['{"note":"typed by hand"}', '{"answer":"maybe"}',
                                     '{"answer":["yes"]}', "[]"],
                         ids=["no-answer", "other-answer", "answer-not-text", "not-object"])
def test_an_event_under_the_key_that_is_no_answer_stands_as_unknown(backend: Store,
                                                                    payload: str) -> None:
    backend.request_approval("refund-1", T0, H, "refund")
    assert plant(backend, "approval", "refund-1", payload, T0 + 1).outcome == "stored"
    assert backend.answer_approval("refund-1", "yes", T0 + 2) == "unknown"
    [pending] = backend.approvals(T0 + 2)  # no outcome stored: pending, then expired
    assert pending.outcome == "pending"
    assert backend.approvals(T0 + H)[0].outcome == "expired"


def test_the_listing_and_an_answer_agree_at_the_deadline(backend: Store) -> None:
    backend.request_approval("refund-1", T0, H, "refund")
    backend.request_approval("refund-2", T0, H, "refund")
    assert [a.outcome for a in backend.approvals(T0 + H - 1)] == ["pending", "pending"]
    assert [a.outcome for a in backend.approvals(T0 + H)] == ["expired", "expired"]
    assert backend.answer_approval("refund-1", "yes", T0 + H) == "expired"
    assert backend.answer_approval("refund-2", "yes", T0 + H - 1) == "yes"


def test_the_listing_says_when_each_request_was_made_and_answered(backend: Store) -> None:
    backend.request_approval("b-later", T0 + 5, H, "second")
    backend.request_approval("a-first", T0, 2 * H, "first")
    backend.request_approval("c-same-time", T0 + 5, H, "third")
    assert backend.answer_approval("b-later", "yes", T0 + 60) == "yes"
    backend.tick(T0 + 2 * H)  # a-first and c-same-time expire, b-later's expiry finds it taken
    assert backend.approvals(T0 + 2 * H) == [
        Approval("a-first", "first", T0, T0 + 2 * H, "expired", T0 + 2 * H),
        Approval("b-later", "second", T0 + 5, T0 + 5 + H, "yes", T0 + 60),
        Approval("c-same-time", "third", T0 + 5, T0 + 5 + H, "expired", T0 + 2 * H)]
    backend.request_approval("d-open", T0 + 3 * H, H, "fourth")
    assert backend.approvals(T0 + 3 * H)[-1] == Approval(
        "d-open", "fourth", T0 + 3 * H, T0 + 4 * H, "pending", None)


def test_the_expiry_of_a_pending_request_cannot_be_removed(backend: Store) -> None:
    backend.request_approval("refund-1", T0, H, "refund")
    with pytest.raises(NotAsAsked) as refused:
        backend.remove_timer("expire:refund-1", T0 + 1)
    assert str(refused.value) == ("timer 'expire:refund-1' is the expiry of approval "
                                  "'refund-1'; it goes when it fires")
    backend.tick(T0 + H)
    assert backend.remove_timer("expire:refund-1", T0 + H + 1)  # spent: it may go
    assert backend.timers(include_done=True) == []


def test_a_later_answer_leaves_the_outcome_and_its_story_alone(backend: Store) -> None:
    backend.request_approval("refund-1", T0, H, "refund")
    assert backend.answer_approval("refund-1", "yes", T0 + 1) == "yes"
    event = backend.find("approval", "refund-1")
    assert event is not None
    assert backend.answer_approval("refund-1", "no", T0 + 2) == "yes"
    backend.tick(T0 + H)  # the expiry finds the outcome taken too
    assert [e.action for e in backend.story(event.id)] == ["stored"]
    assert backend.find("approval", "refund-1") == event


def test_no_timer_of_one_s_own_takes_an_expiry_s_name(backend: Store) -> None:
    """Without its expiry an unanswered request would never come back to the agent."""
    mine = TimerSpec(name="expire:refund-1", due=T0 + 60, every=None)
    with pytest.raises(BadInput) as refused:
        backend.add_timer(mine, T0)
    assert str(refused.value) == "timer names beginning 'expire:' are kept for approvals' expiries"
    assert backend.timers() == []
    assert backend.request_approval("refund-1", T0, H, "refund")
    for replacing in (mine, mine._replace(follow_up=True)):  # by an operator, or by a run
        with pytest.raises(BadInput, match="kept for approvals' expiries"):
            backend.add_timer(replacing, T0, replace=True)
    [timer] = backend.timers()
    assert (timer.name, timer.due, timer.event_source, timer.event_id) == (
        "expire:refund-1", T0 + H, "approval", "refund-1")


def test_pending_approvals_are_the_unanswered_live_ones_soonest_deadline_first(
        backend: Store) -> None:
    backend.request_approval("late", T0, 3 * H, "third")
    backend.request_approval("b-tie", T0, H, "second")
    backend.request_approval("a-tie", T0 + 1, H - 1, "first")  # the same deadline: by id
    backend.request_approval("answered", T0, 2 * H, "answered")
    backend.request_approval("gone", T0, 10, "expires first")
    assert backend.answer_approval("answered", "no", T0 + 5) == "no"
    pending = [Approval("a-tie", "first", T0 + 1, T0 + H, "pending", None),
               Approval("b-tie", "second", T0, T0 + H, "pending", None),
               Approval("late", "third", T0, T0 + 3 * H, "pending", None)]
    assert backend.pending_approvals(T0 + 9) == [
        Approval("gone", "expires first", T0, T0 + 10, "pending", None), *pending]
    assert backend.pending_approvals(T0 + 10) == pending  # at its deadline it expired
    assert backend.pending_approvals(T0 + 10, limit=2) == pending[:2]
    assert backend.pending_approvals(T0 + H) == pending[2:]
    assert backend.pending_approvals(T0 + 3 * H) == []
    assert backend.answer_approval("late", "yes", T0 + H) == "yes"
    assert backend.pending_approvals(T0 + H) == []


def test_pending_approvals_lists_a_hundred_unless_told(backend: Store) -> None:
    for n in range(101):
        backend.request_approval(f"r{n:03}", T0, H + n, "refund")
    listed = backend.pending_approvals(T0)
    assert [a.id for a in listed] == [f"r{n:03}" for n in range(100)]
    assert len(backend.pending_approvals(T0, limit=101)) == 101


def test_a_request_s_expiry_replaces_a_timer_left_under_its_name(backend: Store) -> None:
    """A timer the library let through under ``expire:ID`` (it names an outcome event) is
    taken over by the request: the approval expires when it says, not when that timer did."""
    assert backend.add_timer(TimerSpec(name="expire:refund-1", due=T0 + 60, every=None,
                                       payload="{}", event_source="approval",
                                       event_id="refund-1"), T0) == "added"
    assert backend.request_approval("refund-1", T0 + 1, 4 * H, "refund order 1")
    [timer] = backend.timers()
    assert (timer.name, timer.due, timer.created_at) == ("expire:refund-1", T0 + 1 + 4 * H,
                                                         T0 + 1)
    assert json.loads(timer.payload) == {"action": "refund order 1", "answer": "expired",
                                         "approval": "refund-1"}
