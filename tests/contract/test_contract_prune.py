"""Store contract: what a prune removes, what it keeps, and the keys it remembers."""

from __future__ import annotations

import pytest

from agentbox import upkeep
from agentbox.errors import Busy
from agentbox.ledger.pause import USAGE_SLOT_S
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Usage
from agentbox.rules.outbox import Dispatch, Wait
from agentbox.rules.policy import DAY, Policy
from agentbox.rules.records import OUTBOX_STATES
from agentbox.rules.retention import PruneCounts, cutoffs
from agentbox.rules.timers import TimerSpec
from support.clock import T0, TTL
from support.store import run, say, store_snapshot

KEEP = 30 * DAY
WINDOW = 90 * DAY
POLICY = Policy(lease_ttl=TTL, keep_done=KEEP, keep_sent=KEEP, dedupe_window=WINDOW)
LATER = T0 + KEEP + 1  # every event finished at T0 is past keep_done by then


def no_sleep(_: float) -> None:
    pass


def prune(store: Store, now: int, policy: Policy = POLICY, step: int = 500) -> PruneCounts:
    report = upkeep.prune(store, now, policy, step=step, sleep=no_sleep)
    assert report.complete
    return report.counts


def done_events(store: Store, n: int, now: int = T0, source: str = "hook") -> list[int]:
    got = [store.ingest(source, f"{source}-{i}", f'{{"n":{i}}}', now).id for i in range(n)]
    run(store, f"finisher-{now}-{source}", now, policy=Policy(lease_ttl=TTL, max_batch=n))
    return got


def test_done_events_past_keep_done_go_with_their_history(backend: Store) -> None:
    old = done_events(backend, 3)
    fresh = done_events(backend, 2, now=T0 + 10 * DAY, source="late")
    assert backend.story(old[0])
    counts = prune(backend, LATER)
    assert counts.events == 3
    for event_id in old:
        assert backend.event(event_id) is None and backend.story(event_id) == []
    assert [backend.event(i) is not None for i in fresh] == [True, True]
    assert backend.status().events["done"] == 2
    assert backend.find("hook", "hook-0") is None
    assert backend.vitals().last_prune == backend.last_prune() == LATER


def test_an_inbox_never_pruned_has_no_last_prune(backend: Store) -> None:
    backend.ingest("s", "1", "{}", T0)
    assert backend.vitals().last_prune is backend.last_prune() is None


def test_dead_pending_and_running_events_are_never_pruned_by_age(backend: Store) -> None:
    poison = Policy(lease_ttl=TTL, max_attempts=1, max_batch=1)
    dead_id = backend.ingest("s", "dead", "{}", T0).id
    generation = backend.acquire("w", T0, TTL)
    assert generation is not None
    claimed = backend.claim("w", generation, T0, poison)
    assert claimed is not None and backend.fail("w", generation, T0, [dead_id], "boom", poison)
    running_id = backend.ingest("s", "running", "{}", T0).id
    assert ids_of(backend.claim("w", generation, T0, poison)) == [running_id]
    pending_id = backend.ingest("s", "pending", "{}", T0).id
    before = store_snapshot(backend, [dead_id, running_id, pending_id])
    assert prune(backend, T0 + 1000 * DAY) == PruneCounts()
    assert store_snapshot(backend, [dead_id, running_id, pending_id])["events"] == before["events"]
    assert backend.status().events == {"pending": 1, "running": 1, "done": 0, "dead": 1}


def ids_of(events: list | None) -> list[int]:
    assert events is not None
    return [e.id for e in events]


def test_a_pruned_key_is_still_duplicate_or_conflict_inside_the_window(backend: Store) -> None:
    [first, _] = done_events(backend, 2)
    prune(backend, LATER)
    assert backend.event(first) is None
    before = store_snapshot(backend, [first])  # its story went with it, and stays gone
    again = backend.ingest("hook", "hook-0", '{"n":0}', LATER)
    assert (again.outcome, again.id) == ("duplicate", first)
    changed = backend.ingest("hook", "hook-0", '{"n":99}', LATER)
    assert (changed.outcome, changed.id) == ("conflict", first)
    many = backend.ingest_many([("hook", "hook-0", '{"n":0}'), ("hook", "hook-1", "{}")],
                               LATER)
    assert [r.outcome for r in many] == ["duplicate", "conflict"]
    assert store_snapshot(backend, [first]) == before
    assert backend.find("hook", "hook-0") is None

    # the window counts from the event's arrival (T0): after it the key is free again
    last = T0 + WINDOW - 1
    assert backend.ingest("hook", "hook-0", '{"n":0}', last).outcome == "duplicate"
    stored = backend.ingest("hook", "hook-0", '{"n":5}', T0 + WINDOW)
    assert stored.outcome == "stored" and stored.id > first
    event = backend.find("hook", "hook-0")
    assert event is not None and event.payload == '{"n":5}'


def test_a_window_of_zero_forgets_a_key_when_its_event_goes(backend: Store) -> None:
    done_events(backend, 2)
    counts = prune(backend, LATER, POLICY._replace(dedupe_window=0))
    assert counts.events == 2  # the newest too
    assert backend.ingest("hook", "hook-0", "{}", LATER).outcome == "stored"


def test_a_prune_past_keep_done_leaves_no_done_event(backend: Store) -> None:
    done_events(backend, 3)
    assert prune(backend, LATER).events == 3
    assert backend.events() == [] and backend.status().events["done"] == 0


def test_ids_are_never_given_out_twice_even_after_every_row_went(backend: Store) -> None:
    done_events(backend, 3)
    say(backend, T0, "one", "two")
    send(backend, T0)
    highest = max(e.id for e in backend.events())
    top_message = max(m.id for m in backend.outbox(OUTBOX_STATES))
    counts = prune(backend, LATER)
    assert (counts.events, counts.messages) == (3, 2)
    assert backend.events() == [] and backend.outbox(OUTBOX_STATES) == []
    assert backend.ingest("hook", "brand-new", "{}", LATER).id == highest + 1
    batch = backend.ingest_many([("hook", "b1", "{}"), ("hook", "b1", "{}"),
                                 ("hook", "b2", "{}")], LATER)
    assert batch[0].id > highest + 1 and batch[2].id > batch[0].id
    say(backend, LATER, "three")
    [message] = backend.outbox(OUTBOX_STATES)
    assert message.id > top_message


def test_a_batch_after_a_prune_of_the_newest_is_numbered_above_them(backend: Store) -> None:
    done_events(backend, 2)
    highest = max(e.id for e in backend.events())
    prune(backend, LATER)
    batch = backend.ingest_many([("hook", "b1", "{}"), ("hook", "b2", "{}")], LATER)
    assert [r.outcome for r in batch] == ["stored", "stored"]
    assert min(r.id for r in batch) > highest


def test_keys_past_the_window_are_forgotten_by_the_next_prune(backend: Store) -> None:
    done_events(backend, 3)
    assert prune(backend, LATER).events == 3
    counts = prune(backend, T0 + WINDOW)
    assert counts.keys_forgotten == 3 and counts.events == 0
    assert prune(backend, T0 + WINDOW + 1) == PruneCounts()


def test_approval_outcomes_stay_with_their_request(backend: Store) -> None:
    assert backend.request_approval("refund-1", T0, 3600, "refund order 1")
    assert backend.answer_approval("refund-1", "yes", T0 + 1) == "yes"
    run(backend, "agent", T0 + 2)
    backend.ingest("hook", "later", "{}", T0 + 3)
    prune(backend, T0 + 400 * DAY)
    [approval] = backend.approvals(T0 + 400 * DAY)
    assert approval.outcome == "yes"
    assert backend.answer_approval("refund-1", "no", T0 + 400 * DAY) == "yes"


def send(store: Store, now: int, gap: int = 3600) -> Dispatch:
    found = store.claim_dispatch(now, "at-least-once", gap, 60)
    assert isinstance(found, Dispatch), found
    assert store.settle_dispatch(found.key, "sent", now, attempt=found.tries)
    return found


def test_sent_messages_and_settled_dispatches_past_keep_sent_go(backend: Store) -> None:
    say(backend, T0, "one", "two")
    send(backend, T0)
    say(backend, T0 + 2 * 3600, "three")
    failed = backend.claim_dispatch(T0 + 2 * 3600, "at-least-once", 3600, 60)
    assert isinstance(failed, Dispatch)
    assert backend.settle_dispatch(failed.key, "failed", T0 + 2 * 3600, "no", attempt=1)
    uncertain = backend.claim_dispatch(T0 + 3 * 3600, "at-most-once", 3600, 60)
    assert isinstance(uncertain, Dispatch)
    assert backend.settle_dispatch(uncertain.key, "unknown", T0 + 3 * 3600, "lost",
                                   attempt=1)
    say(backend, T0 + 4 * 3600, "four")
    counts = prune(backend, T0 + 4 * 3600 + KEEP)
    assert (counts.messages, counts.dispatches) == (2, 2)
    assert [m.state for m in backend.outbox(OUTBOX_STATES)] == ["uncertain", "held"]
    assert backend.status().outbox == {"held": 1, "sending": 0, "sent": 0, "uncertain": 1}
    assert backend.resolve_dispatch(uncertain.key, True, T0 + 4 * 3600 + KEEP) == 1


def test_the_last_send_stays_while_it_paces_the_outbox(backend: Store) -> None:
    gap = 60 * DAY  # longer than keep_sent: pruning the send must not shorten it
    say(backend, T0, "one")
    send(backend, T0, gap)
    say(backend, T0 + 1, "two")
    counts = prune(backend, T0 + KEEP + 10, POLICY._replace(outbox_gap=gap))
    assert (counts.messages, counts.dispatches) == (1, 0)
    found = backend.claim_dispatch(T0 + KEEP + 10, "at-least-once", gap, 60)
    assert isinstance(found, Wait) and found.until == T0 + gap


def test_a_dry_run_counts_what_a_prune_removes_and_changes_nothing(backend: Store) -> None:
    done_events(backend, 4)
    say(backend, T0, "hello")
    send(backend, T0)
    say(backend, T0 + 1, "newest")
    backend.ingest("hook", "newest", "{}", T0)
    before = store_snapshot(backend, range(1, 8))
    cut = cutoffs(LATER, POLICY)
    counted = backend.prunable(cut)
    assert store_snapshot(backend, range(1, 8)) == before
    assert counted.events == 4 and counted.messages == 1 and counted.dispatches == 1
    assert counted.total == 6
    assert prune(backend, LATER) == counted
    assert backend.prunable(cut) == PruneCounts()


def test_each_step_removes_at_most_its_limit(backend: Store) -> None:
    done_events(backend, 8)
    cut = cutoffs(LATER, POLICY)
    steps = []
    while (done := backend.prune_step(cut, 3)).total:
        steps.append(done.events)
    assert steps == [3, 3, 2]
    assert backend.status().events["done"] == 0


def test_timer_history_keeps_its_last_keep_done(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="hourly", due=T0, every=3600), T0)
    for hour in range(3):
        assert backend.tick(T0 + hour * 3600, POLICY) == 1
    run(backend, "agent", T0 + 7200)
    backend.ingest("hook", "newest", "{}", T0 + 7200)
    assert len(backend.timer_events("hourly")) == 3
    counts = prune(backend, T0 + 7200 + KEEP + 1)
    assert (counts.events, counts.timer_history) == (3, 4)  # added, and fired three times
    assert backend.timer_events("hourly") == []
    assert backend.tick(T0 + 7200 + KEEP + 1, POLICY) == 1  # the schedule itself stands
    assert [t.name for t in backend.timers()] == ["hourly"]


def test_a_removed_timer_s_history_goes_too(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="once", due=T0 + 60, every=None), T0)
    assert backend.remove_timer("once", T0 + 1)
    cut = cutoffs(T0 + 2 + KEEP, POLICY)
    assert backend.prunable(cut).timer_history == 2  # added, removed
    assert backend.prunable(cutoffs(T0 + 1 + KEEP, POLICY)).timer_history == 1


def test_space_is_handed_back_until_none_is_left(backend: Store) -> None:
    done_events(backend, 200)
    prune(backend, LATER)  # hands back what it can
    assert backend.reclaim(10**6) == 0


def test_a_resolved_dispatch_goes_once_past_keep_sent(backend: Store) -> None:
    say(backend, T0, "hello")
    uncertain = backend.claim_dispatch(T0, "at-most-once", 0, 60)
    assert isinstance(uncertain, Dispatch)
    assert backend.settle_dispatch(uncertain.key, "unknown", T0 + 1, "lost", attempt=1)
    assert backend.resolve_dispatch(uncertain.key, True, T0 + 2) == 1
    assert prune(backend, T0 + 2 + KEEP - 1).dispatches == 0  # kept from its resolve on
    assert prune(backend, T0 + 2 + KEEP + 1).dispatches == 1


def test_what_runs_spent_goes_after_keep_done_but_never_within_two_days(backend: Store) -> None:
    for at in (T0, T0 + 10, T0 + 20):
        run(backend, "agent", at, Answer(usage=Usage(tokens=at - T0 + 1)))
    brief = POLICY._replace(keep_done=60)  # shorter than a day: two days stay anyway
    assert backend.prunable(cutoffs(T0 + 2 * DAY, brief)).usage == 0
    assert backend.prunable(cutoffs(T0 + 2 * DAY + 1, brief)).usage == 1
    assert backend.prunable(cutoffs(T0 + KEEP + 11, POLICY)).usage == 2  # keep_done, longer
    assert prune(backend, T0 + KEEP + 10).usage == 1  # the one at T0
    assert [r.tokens for r in backend.usage()] == [21, 11]
    # The three share a quarter hour, whose total goes with the last of them.
    quarter = (T0 - T0 % USAGE_SLOT_S, T0 - T0 % USAGE_SLOT_S + USAGE_SLOT_S)
    assert backend.spent(quarter) == (33, 0)
    assert prune(backend, quarter[1] + KEEP).usage == 2
    assert backend.spent(quarter) == (0, 0)


def test_a_sent_message_and_its_dispatch_go_with_their_history(backend: Store) -> None:
    say(backend, T0, "hello")
    sent = send(backend, T0)
    [message] = sent.message_ids
    assert backend.history("message", message) and backend.history("dispatch", sent.key)
    counts = prune(backend, T0 + KEEP + 3600)
    assert (counts.messages, counts.dispatches) == (1, 1)
    assert backend.history("message", message) == []
    assert backend.history("dispatch", sent.key) == []


def test_one_limit_is_shared_by_every_kind_oldest_kind_first(backend: Store) -> None:
    """A step stops at its limit: what one kind took, the kinds after it may not (and a
    limit of none or less takes nothing)."""
    done_events(backend, 2)
    say(backend, T0, "hello")
    send(backend, T0)
    cut = cutoffs(T0 + KEEP + 3600, POLICY)
    assert backend.prunable(cut) == PruneCounts(events=2, messages=1, dispatches=1)
    assert backend.prune_step(cut, 0) == backend.prune_step(cut, -1) == PruneCounts()
    assert backend.prune_step(cut, 1) == PruneCounts(events=1)
    assert backend.prune_step(cut, 2) == PruneCounts(events=1, messages=1)
    assert backend.prune_step(cut, 2) == PruneCounts(dispatches=1)
    assert backend.prune_step(cut, 2) == PruneCounts()


def test_a_key_refused_yet_never_found_is_given_up_on_as_busy(
        backend: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should a refused key be neither stored nor remembered each time it is looked
    for (a prune forgetting it between the two reads, again and again), the ingest
    ends Busy and says which key, as an approval's outcome stored under the lock does."""
    import agentbox.ledger.inbox as inbox

    done_events(backend, 1)
    prune(backend, LATER)  # hook-0 is remembered, its event gone
    backend.request_approval("r-1", LATER, 3_600, "refund")
    backend.answer_approval("r-1", "yes", LATER)
    monkeypatch.setattr(inbox, "_judged", lambda *_: None)
    with pytest.raises(Busy) as ingest:
        backend.ingest("hook", "hook-0", '{"n":0}', LATER)
    assert str(ingest.value) == "event hook/hook-0 kept changing under concurrent writers"
    with pytest.raises(Busy) as answer:
        backend.answer_approval("r-1", "no", LATER + 1)
    assert str(answer.value) == "event approval/r-1 kept changing under concurrent writers"


def test_a_key_refused_then_found_neither_stored_nor_remembered_is_tried_again(
        backend: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune may forget a key between the write that refused it and the read that
    judges it: the ingest then tries the write again, and stores the event."""
    refuse_once = [True]
    store_event = backend.engine.store_event

    def raced(*args: object) -> int | None:
        if refuse_once.pop() if refuse_once else False:
            return None  # as if the key were still remembered when the write ran
        return store_event(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(backend.engine, "store_event", raced)
    stored = backend.ingest("hook", "hook-0", '{"n":0}', T0)
    assert stored.outcome == "stored" and backend.event(stored.id) is not None
    assert refuse_once == []


def test_keys_with_percent_signs_are_pruned_and_remembered(
        backend: Store) -> None:
    """A ``%`` is only text: keys like ``50%off`` and ``%s`` are pruned and remembered
    as any other (PostgreSQL's driver reads ``%`` in a statement as a parameter)."""
    old = done_events(backend, 2, source="50%off %s")
    assert prune(backend, LATER).events == 2
    assert [backend.event(i) for i in old] == [None, None]
    again = backend.ingest("50%off %s", "50%off %s-0", '{"n":0}', LATER)
    assert again.outcome == "duplicate"
