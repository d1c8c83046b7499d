"""Store contract: the lease, claim, finish and fail, and their fence."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, ApprovalRequest, FollowUp, Message, TimerSpec
from agentbox.rules.policy import Policy
from agentbox.rules.records import Entry, Lease
from support.clock import T0, TTL
from support.store import POLICY, store_snapshot

LATER = TTL + 1


def test_lease_acquire_renew_takeover_release(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    assert backend.lease() == Lease("A", 1, T0 + TTL)
    assert backend.acquire("B", T0 + TTL, TTL) is None
    assert backend.acquire("A", T0 + 10, TTL) == 1
    assert backend.renew("A", 1, T0 + 20, TTL)
    assert backend.lease() == Lease("A", 1, T0 + 20 + TTL)
    assert not backend.renew("B", 1, T0 + 21, TTL)
    assert not backend.renew("A", 1, T0 + 20 + LATER, TTL)  # lapsed
    assert backend.acquire("A", T0 + 20 + LATER, TTL) == 2   # own takeover bumps too
    assert backend.acquire("B", T0 + 20 + 2 * LATER, TTL) == 3
    assert not backend.release("A", 2, T0 + 20 + 2 * LATER)
    assert backend.release("B", 3, T0 + 20 + 2 * LATER + 1)
    assert backend.acquire("A", T0 + 20 + 2 * LATER + 1, TTL) == 4  # no wait after release
    assert backend.status().lease == backend.lease()


def test_a_released_lease_is_free_whatever_the_clock_says(backend: Store) -> None:
    """A release frees the lease for good, not until some time: after a run at a later
    clock (an NTP step back, a pinned AGENTBOX_NOW) the next one must not wait."""
    assert not backend.release("A", 1, T0 + 1000)  # never taken: nothing to release
    assert backend.acquire("A", T0 + 1000, TTL) == 1
    assert backend.release("A", 1, T0 + 1000)
    assert backend.lease() == Lease("A", 1, T0 + 1000, True)  # until: when it was released
    assert backend.acquire("B", T0, TTL) == 2  # the clock went back 1000 s
    assert backend.release("B", 2, T0)
    assert backend.acquire("B", T0 - 500, TTL) == 3  # the same holder: the generation counts up
    assert backend.lease() == Lease("B", 3, T0 - 500 + TTL)
    assert backend.status().lease == backend.lease()


def test_a_released_lease_fences_its_holder_at_any_clock(backend: Store) -> None:
    event = backend.ingest("chat", "m1", "{}", T0).id
    assert backend.acquire("A", T0, TTL) == 1
    assert [e.id for e in backend.claim("A", 1, T0, POLICY) or []] == [event]
    assert backend.release("A", 1, T0)
    before = store_snapshot(backend, [event])
    for now in (T0 - 100, T0, T0 + 1):
        assert not backend.renew("A", 1, now, TTL)
        assert not backend.release("A", 1, now)
        assert backend.claim("A", 1, now, POLICY) is None
        assert not backend.finish("A", 1, now, [event])
        assert not backend.fail("A", 1, now, [event], "late", POLICY)
    assert store_snapshot(backend, [event]) == before


def test_claim_takes_the_pending_batch_under_the_generation(backend: Store) -> None:
    ids = [backend.ingest("chat", f"m{n}", "{}", T0).id for n in range(3)]
    assert backend.acquire("A", T0, TTL) == 1
    assert backend.claim("B", 1, T0, POLICY) is None
    batch = backend.claim("A", 1, T0, POLICY)
    assert batch is not None
    assert [(e.id, e.status, e.attempts, e.claim_gen) for e in batch] == [
        (i, "running", 1, 1) for i in ids]
    assert backend.claim("A", 1, T0, POLICY) == []
    assert backend.status().events["running"] == 3


def test_claim_respects_max_batch(backend: Store) -> None:
    for n in range(5):
        backend.ingest("chat", f"m{n}", "{}", T0)
    backend.acquire("A", T0, TTL)
    sizes = []
    for _ in range(3):
        batch = backend.claim("A", 1, T0, Policy(max_batch=2))
        assert batch is not None
        sizes.append(len(batch))
        assert backend.finish("A", 1, T0, [e.id for e in batch])
    assert sizes == [2, 2, 1]


def test_takeover_requeues_retries_alone_and_buries_the_exhausted(backend: Store) -> None:
    poison = backend.ingest("chat", "poison", "{}", T0).id
    healthy = backend.ingest("chat", "healthy", "{}", T0).id
    now, seen = T0, []
    for n in range(5):
        holder = f"W{n}"
        generation = backend.acquire(holder, now, TTL)
        assert generation == n + 1
        batch = backend.claim(holder, generation, now, POLICY)
        assert batch is not None
        seen.append([e.id for e in batch])
        if poison not in seen[-1]:
            assert backend.finish(holder, generation, now, seen[-1])
        now += LATER
    assert seen == [[poison, healthy], [poison], [poison], [healthy], []]
    dead, done = backend.event(poison), backend.event(healthy)
    assert dead is not None and (dead.status, dead.attempts) == ("dead", 3)
    assert dead.error and "too many attempts" in dead.error
    assert done is not None and (done.status, done.attempts) == ("done", 2)


def test_finish_is_fenced_and_a_refusal_changes_nothing(backend: Store) -> None:
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, POLICY)
    reply = Answer(messages=(Message("report sent"),))
    before = store_snapshot(backend, [event_id])
    assert not backend.finish("B", 1, T0 + 1, [event_id], reply)      # wrong holder
    assert not backend.finish("A", 2, T0 + 1, [event_id], reply)      # wrong generation
    assert not backend.finish("A", 1, T0 + LATER, [event_id], reply)  # lapsed
    assert not backend.finish("A", 1, T0 + 1, [event_id, 999], reply)  # not all ours
    assert not backend.fail("B", 1, T0 + 1, [event_id], "x", POLICY)
    assert store_snapshot(backend, [event_id]) == before

    assert backend.acquire("B", T0 + LATER, TTL) == 2
    backend.claim("B", 2, T0 + LATER, POLICY)
    assert backend.acquire("A", T0 + 2 * LATER + 1, TTL) == 3  # A is back, as generation 3
    before = store_snapshot(backend, [event_id])
    assert not backend.finish("A", 1, T0 + 2 * LATER + 1, [event_id], reply)
    assert store_snapshot(backend, [event_id]) == before


def test_finish_marks_done_and_queues_the_answer_together(backend: Store) -> None:
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, POLICY)
    assert backend.finish("A", 1, T0 + 5, [event_id],
                          Answer(messages=(Message("one"), Message("two", urgent=True))))
    event = backend.event(event_id)
    assert event is not None and (event.status, event.error) == ("done", None)
    held = backend.outbox()
    assert [(m.body, m.urgent, m.state, m.created_at) for m in held] == [
        ("one", False, "held", T0 + 5), ("two", True, "held", T0 + 5)]
    assert not backend.finish("A", 1, T0 + 6, [event_id])  # done rows are not ours to finish
    assert backend.status().outbox["held"] == 2


def test_fail_retries_later_or_buries_on_the_last_attempt(backend: Store) -> None:
    policy = Policy(lease_ttl=TTL, max_attempts=2, retry_backoff=30, backoff_cap=100)
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, policy)
    assert backend.fail("A", 1, T0, [event_id], "first", policy)
    event = backend.event(event_id)
    assert event is not None
    assert (event.status, event.error, event.available_at) == ("pending", "first", T0 + 30)
    assert backend.claim("A", 1, T0 + 29, policy) == []
    batch = backend.claim("A", 1, T0 + 30, policy)
    assert batch is not None and [e.attempts for e in batch] == [2]
    assert backend.fail("A", 1, T0 + 30, [event_id], "second", policy)
    event = backend.event(event_id)
    assert event is not None and (event.status, event.error) == ("dead", "second")


def test_finish_writes_the_whole_answer_or_nothing(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="digest", due=T0 + 500, every=3600), T0)
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, POLICY)
    before = store_snapshot(backend, [event_id])
    clashing = Answer(messages=(Message("hi"),),
                      approvals=(ApprovalRequest("refund-1", 3600, "refund order 1"),),
                      timers=(FollowUp("digest", 60),))  # may not replace a schedule
    with pytest.raises(BadInput):
        backend.finish("A", 1, T0 + 1, [event_id], clashing)
    assert store_snapshot(backend, [event_id]) == before  # not even the message

    answer = Answer(messages=(Message("hi"),),
                    approvals=(ApprovalRequest("refund-1", 3600, "refund order 1"),),
                    timers=(FollowUp("check-back", 60, '{"why":"follow up"}'),))
    assert backend.finish("A", 1, T0 + 1, [event_id], answer)
    [approval] = backend.approvals(T0 + 1)
    assert (approval.id, approval.outcome, approval.expires_at) == ("refund-1", "pending",
                                                                     T0 + 1 + 3600)
    follow_up = next(t for t in backend.timers() if t.name == "check-back")
    assert (follow_up.due, follow_up.every, follow_up.payload) == (T0 + 61, None,
                                                                   '{"why":"follow up"}')
    assert [m.body for m in backend.outbox(limit=1)] == ["hi"]


def test_a_follow_up_re_arms_a_live_one_off_timer_of_its_name(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="check-back", due=T0 + 500, every=None), T0)
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, POLICY)
    answer = Answer(timers=(FollowUp("check-back", 60, '{"n":2}'),))
    assert backend.finish("A", 1, T0 + 1, [event_id], answer)
    assert [(t.name, t.due, t.payload) for t in backend.timers()] == [
        ("check-back", T0 + 61, '{"n":2}')]


def test_interrupt_gives_the_attempt_back_and_never_buries(backend: Store) -> None:
    policy = Policy(lease_ttl=TTL, max_attempts=2)
    ids = [backend.ingest("chat", f"m{n}", "{}", T0).id for n in range(2)]
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, policy)
    assert backend.fail("A", 1, T0, ids, "first try", policy)
    batch = backend.claim("A", 1, T0 + 1, policy)  # a retry: claimed alone, its last attempt
    assert batch is not None and [(e.id, e.attempts) for e in batch] == [(ids[0], 2)]
    assert backend.interrupt("A", 1, T0 + 2, [ids[0]])
    event = backend.event(ids[0])
    assert event is not None
    assert (event.status, event.attempts, event.error) == ("pending", 1, "first try")
    story = backend.story(ids[0])
    assert (story[-1].action, story[-1].generation, story[-1].detail) == (
        "interrupted", 1, "run stopped; attempt 2 given back")
    again = backend.claim("A", 1, T0 + 3, policy)
    assert again is not None and [(e.id, e.attempts) for e in again] == [(ids[0], 2)]


def test_interrupt_is_fenced(backend: Store) -> None:
    event_id = backend.ingest("chat", "m", "{}", T0).id
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, POLICY)
    before = store_snapshot(backend, [event_id])
    assert not backend.interrupt("B", 1, T0 + 1, [event_id])        # wrong holder
    assert not backend.interrupt("A", 2, T0 + 1, [event_id])        # wrong generation
    assert not backend.interrupt("A", 1, T0 + LATER, [event_id])    # lapsed
    assert not backend.interrupt("A", 1, T0 + 1, [event_id, 999])   # not all ours
    assert store_snapshot(backend, [event_id]) == before
    assert backend.finish("A", 1, T0 + 1, [event_id])
    assert not backend.interrupt("A", 1, T0 + 2, [event_id])        # done is done


def test_next_work_says_when_a_run_has_something_to_do(backend: Store) -> None:
    policy = Policy(lease_ttl=TTL, retry_backoff=30, backoff_cap=100)
    assert backend.next_work(T0) is None
    backend.add_timer(TimerSpec(name="digest", due=T0 + 500, every=3600), T0)
    assert backend.next_work(T0) == T0 + 500
    event_id = backend.ingest("chat", "m", "{}", T0).id
    due = backend.next_work(T0)
    assert due is not None and due <= T0  # work now
    backend.acquire("A", T0, TTL)
    backend.claim("A", 1, T0, policy)
    # Running under a live lease: nothing for another run until that lease ends.
    assert backend.next_work(T0 + 1) == T0 + TTL + 1
    assert backend.fail("A", 1, T0 + 1, [event_id], "boom", policy)
    assert backend.next_work(T0 + 1) == T0 + 31  # the retry's backoff, before the timer
    assert backend.release("A", 1, T0 + 1)
    assert backend.claim("A", 1, T0 + 1, policy) is None  # the lease is gone
    assert backend.acquire("B", T0 + 40, TTL) == 2
    batch = backend.claim("B", 2, T0 + 40, policy)
    assert batch is not None and len(batch) == 1
    assert backend.finish("B", 2, T0 + 40, [event_id])
    assert backend.next_work(T0 + 40) == T0 + 500
    # Left running by a worker whose lease was released: work at once.
    backend.ingest("chat", "n", "{}", T0 + 41)
    assert backend.claim("B", 2, T0 + 41, policy)
    assert backend.release("B", 2, T0 + 41)
    due = backend.next_work(T0 + 42)
    assert due is not None and due <= T0 + 42


def test_a_holder_of_a_newer_generation_cannot_settle_a_claim_of_an_older_one(
        backend: Store) -> None:
    """The fence checks the claim's own generation, not only the lease: B took over as
    generation 2 but has not claimed; the event is still running under A's generation 1,
    and neither B's finish, its fail, nor its interrupt may touch it."""
    event_id = backend.ingest("chat", "m", "{}", T0).id
    assert backend.acquire("A", T0, TTL) == 1
    assert [e.id for e in backend.claim("A", 1, T0, POLICY) or []] == [event_id]
    assert backend.acquire("B", T0 + LATER, TTL) == 2  # A's lease lapsed; B holds gen 2
    before = store_snapshot(backend, [event_id])
    reply = Answer(messages=(Message("not mine to send"),))
    assert not backend.finish("B", 2, T0 + LATER, [event_id], reply)
    assert not backend.fail("B", 2, T0 + LATER, [event_id], "boom", POLICY)
    assert not backend.interrupt("B", 2, T0 + LATER, [event_id])
    assert store_snapshot(backend, [event_id]) == before


def test_a_pause_holds_next_work_back_until_it_ends(backend: Store) -> None:
    """While the inbox is paused, work that is due waits for the pause's end; work due
    after it keeps its own time, and an inbox with nothing scheduled has no next work.
    The status shows the pause in force and the next timer."""
    breaks = Policy(lease_ttl=TTL, max_attempts=1, breaker_runs=3, breaker_cooldown=600)
    for n in range(3):  # three failed runs open the breaker
        backend.ingest("chat", f"bad{n}", "{}", T0 + n)
        generation = backend.acquire("W", T0 + n, TTL)
        assert generation is not None
        ids = [e.id for e in backend.claim("W", generation, T0 + n, breaks) or []]
        assert backend.fail("W", generation, T0 + n, ids, "boom", breaks)
        assert backend.release("W", generation, T0 + n)
    pause = backend.paused()
    assert pause is not None and pause.until == T0 + 602
    assert backend.status().paused == pause
    assert backend.next_work(T0 + 3) is None  # every event is dead: nothing scheduled
    backend.add_timer(TimerSpec(name="late", due=T0 + 5000, every=3600), T0 + 3)
    [late] = backend.timers()
    assert backend.status().next_timer == late and late.due == T0 + 5000
    assert backend.next_work(T0 + 3) == T0 + 5000
    backend.ingest("chat", "new", "{}", T0 + 4)
    assert backend.next_work(T0 + 4) == T0 + 602


def test_a_deferred_run_gives_its_attempts_back_and_waits(backend: Store) -> None:
    """A handler's temporary failure (exit 75): each event pending again with the attempt
    given back, the error kept, available after the wait (at least a minute, or the
    retry backoff if longer); each story says ``deferred`` under the run's generation."""
    policy = Policy(lease_ttl=TTL, retry_backoff=90)
    ids = [backend.ingest("chat", f"m{n}", "{}", T0).id for n in range(2)]
    assert backend.acquire("A", T0, TTL) == 1
    assert [e.id for e in backend.claim("A", 1, T0, policy) or []] == ids
    assert backend.defer("A", 1, T0 + 5, ids, "exit 75", policy)
    for event_id in ids:
        event = backend.event(event_id)
        assert event is not None
        assert (event.status, event.attempts, event.error, event.available_at,
                event.updated_at) == ("pending", 0, "exit 75", T0 + 95, T0 + 5)
        assert backend.story(event_id)[-1] == Entry(T0 + 5, "event", str(event_id),
                                                    "deferred", 1,
                                                    "exit 75; attempt 1 given back")
    assert not backend.defer("A", 1, T0 + 6, ids, "exit 75", policy)  # no longer running
    assert backend.next_work(T0 + 6) == T0 + 95
    assert backend.claim("A", 1, T0 + 6, policy) == []
    assert [e.id for e in backend.claim("A", 1, T0 + 95, policy) or []] == ids


def test_an_abandoned_event_goes_back_with_its_reason_after_the_backoff(
        backend: Store) -> None:
    """An event left running by a generation that lost its lease goes back to pending at
    the next claim: the lost generation and attempt in its error, retried after the
    backoff, its story saying ``abandoned`` under the lost generation."""
    policy = Policy(lease_ttl=TTL, retry_backoff=30)
    event_id = backend.ingest("chat", "m", "{}", T0).id
    assert backend.acquire("A", T0, TTL) == 1
    assert backend.claim("A", 1, T0, policy)
    later = T0 + LATER
    assert backend.acquire("B", later, TTL) == 2
    assert backend.claim("B", 2, later, policy) == []  # back to pending, not yet available
    event = backend.event(event_id)
    assert event is not None
    assert (event.status, event.attempts, event.available_at, event.updated_at, event.error) == (
        "pending", 1, later + 30, later, "worker of generation 1 lost its lease during attempt 1")
    assert backend.story(event_id)[-1] == Entry(later, "event", str(event_id), "abandoned", 1,
                                                "attempt 1 never finished")
    assert [e.id for e in backend.claim("B", 2, later + 30, policy) or []] == [event_id]


def test_the_breakers_lines_name_the_run_that_opened_or_closed_it(backend: Store) -> None:
    """The pause a failed (or deferred) run opens is recorded under that run's generation,
    and so is the close by the probe run that finished."""
    breaks = Policy(lease_ttl=TTL, max_attempts=1, breaker_runs=2, breaker_cooldown=600)

    def one_run(now: int, end: str) -> int:
        backend.ingest("chat", f"m{now}", "{}", now)
        generation = backend.acquire("W", now, TTL)
        assert generation is not None
        ids = [e.id for e in backend.claim("W", generation, now, breaks) or []]
        if end == "finish":
            assert backend.finish("W", generation, now, ids)
        else:
            ending = backend.fail if end == "fail" else backend.defer
            assert ending("W", generation, now, ids, "boom", breaks)
        assert backend.release("W", generation, now)
        return generation

    one_run(T0, "fail")
    opened = one_run(T0 + 1, "defer")
    reopened = one_run(T0 + 601, "fail")  # the probe failed
    closed = one_run(T0 + 1201, "finish")  # the next probe finished
    assert len({opened, reopened, closed}) == 3
    assert [(e.at, e.action, e.generation) for e in backend.history("inbox", "pause")] == [
        (T0 + 1, "paused", opened), (T0 + 601, "paused", reopened),
        (T0 + 1201, "resumed", closed)]
