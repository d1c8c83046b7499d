"""Store contract: no time outside the years 1970 to 9999 is ever stored.

A time a write would compute past the end of 9999 (a timer's due time, an
approval's deadline, a retry, a claim deadline) is bad input and the write
changes nothing; a recurring timer whose next occurrence would pass it is spent.
"""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, ApprovalRequest, FollowUp
from agentbox.rules.policy import Policy
from agentbox.rules.timers import TimerSpec
from support.clock import T0
from support.store import say, store_snapshot

LAST = 253_402_300_799  # 9999-12-31T23:59:59Z
DAY = 86_400
CENTURY = 36_500 * DAY  # the longest duration there is


def test_a_timer_due_outside_the_range_is_refused_and_nothing_is_stored(backend: Store) -> None:
    for spec in (TimerSpec("far", LAST + 1, None), TimerSpec("early", -1, DAY),
                 TimerSpec("huge", 2**63 + 5, None)):
        with pytest.raises(BadInput, match="outside the years 1970 to 9999"):
            backend.add_timer(spec, T0)
    assert backend.timers(include_done=True) == []


def test_a_timer_whose_next_occurrence_passes_9999_is_spent(backend: Store) -> None:
    assert backend.add_timer(TimerSpec("last", LAST, CENTURY), T0) == "added"
    assert backend.tick(LAST) == 1
    [timer] = backend.timers(include_done=True)
    assert (timer.due, timer.done) == (LAST, True)
    assert backend.find("timer", f"last@{LAST}") is not None
    assert backend.status().next_timer is None
    assert backend.tick(LAST) == 0


def test_catching_up_each_occurrence_stops_at_the_end_of_9999(backend: Store) -> None:
    first = LAST - 2 * DAY - 5
    assert backend.add_timer(TimerSpec("daily", first, DAY, catch_up="each"), T0) == "added"
    assert backend.tick(LAST, Policy(catch_up_limit=10)) == 1
    assert [e.source_id for e in backend.timer_events("daily")] == [
        f"daily@{first}", f"daily@{first + DAY}", f"daily@{first + 2 * DAY}"]
    [timer] = backend.timers(include_done=True)
    assert timer.done


def test_an_approval_whose_deadline_passes_9999_is_refused_and_nothing_is_stored(
        backend: Store) -> None:
    before = store_snapshot(backend)
    with pytest.raises(BadInput, match="approval 'a1' would expire"):
        backend.request_approval("a1", LAST - 10, 3600, "ship it")
    assert store_snapshot(backend) == before
    assert backend.request_approval("a1", LAST - 3600, 3600, "ship it")
    [approval] = backend.approvals(LAST - 3600)
    assert approval.expires_at == LAST


@pytest.mark.parametrize("answer", [
    Answer(timers=(FollowUp("later", CENTURY),)),
    Answer(approvals=(ApprovalRequest("a1", CENTURY, "ship it"),)),
], ids=["follow-up", "approval"])
def test_an_answer_asking_for_a_time_past_9999_finishes_nothing(backend: Store,
                                                                answer: Answer) -> None:
    now = LAST - 1000
    event = backend.ingest("chat", "m1", "{}", now).id
    assert backend.acquire("w", now, 60) == 1
    assert [e.id for e in backend.claim("w", 1, now, Policy()) or []] == [event]
    before = store_snapshot(backend, [event])
    with pytest.raises(BadInput, match="outside the years 1970 to 9999"):
        backend.finish("w", 1, now, [event], answer)
    assert store_snapshot(backend, [event]) == before


def test_a_retry_past_9999_fails_nothing(backend: Store) -> None:
    now = LAST - 30
    policy = Policy(retry_backoff=60)
    event = backend.ingest("chat", "m1", "{}", now).id
    assert backend.acquire("w", now, 10) == 1
    assert backend.claim("w", 1, now, policy)
    before = store_snapshot(backend, [event])
    with pytest.raises(BadInput, match="a retry would be at"):
        backend.fail("w", 1, now, [event], "handler exploded", policy)
    assert store_snapshot(backend, [event]) == before


def test_a_claim_deadline_past_9999_claims_nothing(backend: Store) -> None:
    say(backend, T0, "hello")
    before = store_snapshot(backend)
    with pytest.raises(BadInput, match="claim deadline"):
        backend.claim_dispatch(LAST - 60, "at-least-once", 0, 60)
    assert store_snapshot(backend) == before


def test_a_lease_that_would_end_past_9999_is_not_taken(backend: Store) -> None:
    with pytest.raises(BadInput, match="the lease would be held until"):
        backend.acquire("A", LAST - 10, 60)
    assert backend.lease() is None
    assert backend.acquire("A", LAST - 60, 60) == 1
    with pytest.raises(BadInput, match="the lease would be held until"):
        backend.renew("A", 1, LAST - 10, 60)
    assert backend.lease() is not None and backend.lease().until == LAST  # type: ignore[union-attr]
