"""Store contract: timers feed the inbox; approvals expire; one outcome stands."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agentbox.errors import BadInput, NotAsAsked
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from agentbox.rules.records import Entry
from agentbox.rules.timers import TimerSpec, cron_due
from support.clock import T0

DAY = 86_400
H = 3_600
DIGEST = TimerSpec(name="digest", due=T0, every=DAY, payload='{"task":"daily digest"}')


def fired(store: Store, name: str, at: int) -> dict[str, object]:
    """The payload of the event a timer wrote for its occurrence at ``at``."""
    event = store.find("timer", f"{name}@{at}")
    assert event is not None, f"no event for {name}@{at}"
    return dict(json.loads(event.payload))


def test_add_is_idempotent_and_a_change_needs_replace(backend: Store) -> None:
    assert backend.add_timer(DIGEST, T0) == "added"
    assert backend.add_timer(DIGEST, T0 + 5) == "unchanged"
    assert backend.timers()[0].created_at == T0  # an unchanged re-add writes nothing
    changed = TimerSpec(name="digest", due=T0, every=DAY, payload='{"task":"other"}')
    with pytest.raises(NotAsAsked):
        backend.add_timer(changed, T0)
    assert backend.add_timer(changed, T0 + 9, replace=True) == "replaced"
    [timer] = backend.timers()
    assert timer.created_at == T0 + 9
    assert (timer.name, timer.due, timer.every, timer.payload, timer.catch_up) == (
        "digest", T0, DAY, '{"task":"other"}', "coalesce")
    assert backend.status().next_timer == timer


def test_bad_timers_are_refused(backend: Store) -> None:
    for spec in (TimerSpec(name="", due=T0, every=None),
                 TimerSpec(name="x", due=T0, every=0),
                 TimerSpec(name="x", due=T0, every=60, catch_up="sometimes")):
        with pytest.raises(BadInput):
            backend.add_timer(spec, T0)
    assert backend.timers(include_done=True) == []


def test_a_pass_fires_due_timers_once_and_advances_them(backend: Store) -> None:
    backend.add_timer(DIGEST, T0)
    assert backend.tick(T0 - 1) == 0
    assert (backend.tick(T0), backend.tick(T0)) == (1, 0)  # the article's pass 1 / pass 2
    assert fired(backend, "digest", T0) == {"task": "daily digest", "timer": "digest",
                                           "scheduled_for": T0, "late_by": 0, "skipped": 0}
    assert backend.status().events["pending"] == 1
    [timer] = backend.timers()
    assert timer.due == T0 + DAY


def test_missed_occurrences_coalesce_into_one_event(backend: Store) -> None:
    backend.add_timer(DIGEST, T0)
    backend.tick(T0)
    later = T0 + DAY + 3 * DAY + 600  # next due, then a three-day outage
    assert backend.tick(later) == 1
    assert backend.status().events["pending"] == 2
    latest = fired(backend, "digest", T0 + 4 * DAY)
    assert (latest["skipped"], latest["late_by"]) == (3, 600)  # ten minutes late
    [timer] = backend.timers()
    assert round((timer.due - later) / H, 1) == 23.8


def test_catch_up_each_writes_one_event_per_missed_occurrence_bounded(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="billing", due=T0, every=DAY, catch_up="each"), T0)
    assert backend.tick(T0 + 4 * DAY) == 1
    assert [fired(backend, "billing", T0 + k * DAY)["skipped"] for k in range(5)] == [0] * 5
    assert backend.status().events["pending"] == 5
    backend.tick(T0 + 14 * DAY, Policy(catch_up_limit=3))
    assert backend.status().events["pending"] == 8  # two alone, then the rest coalesced
    assert [fired(backend, "billing", T0 + k * DAY)["skipped"] for k in (5, 6, 14)] == [0, 0, 7]


def test_a_one_off_fires_once_and_removed_timers_never_fire(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="once", due=T0 + 10, every=None), T0)
    backend.add_timer(TimerSpec(name="gone", due=T0 + 10, every=None), T0)
    assert backend.remove_timer("gone", T0 + 1)
    assert not backend.remove_timer("gone", T0 + 1)
    assert backend.tick(T0 + 10) == 1
    assert backend.tick(T0 + 1000) == 0
    assert backend.timers() == []
    [spent] = backend.timers(include_done=True)
    assert (spent.name, spent.done) == ("once", True)
    assert backend.find("timer", f"once@{T0 + 10}") is not None
    assert backend.find("timer", f"gone@{T0 + 10}") is None


def test_approvals_the_article_cases(backend: Store) -> None:
    for n in (881, 882, 883):
        assert backend.request_approval(f"refund-{n}", T0, 4 * H, f"refund order {n}")
    assert not backend.request_approval("refund-881", T0 + 1, 4 * H, "again")
    assert [a.outcome for a in backend.approvals(T0)] == ["pending"] * 3
    assert backend.answer_approval("refund-883", "yes", T0 + H) == "yes"
    assert backend.answer_approval("refund-883", "no", T0 + 2 * H) == "yes"
    backend.tick(T0 + 5 * H)  # the expiry timers fire; 883's changes nothing
    assert backend.answer_approval("refund-881", "yes", T0 + 6 * H) == "expired"
    assert backend.answer_approval("refund-999", "yes", T0) == "unknown"
    outcomes = {a.id: a.outcome for a in backend.approvals(T0 + 6 * H)}
    assert outcomes == {"refund-881": "expired", "refund-882": "expired",
                        "refund-883": "yes"}
    answer = backend.find("approval", "refund-883")
    assert answer is not None and json.loads(answer.payload)["answer"] == "yes"


def test_an_answer_checks_the_deadline_itself(backend: Store) -> None:
    backend.request_approval("refund-882", T0, 4 * H, "refund order 882")
    # the scheduler has not run: the answer path must see the deadline on its own
    assert backend.answer_approval("refund-882", "yes", T0 + 4 * H) == "expired"
    assert backend.tick(T0 + 5 * H) == 1
    assert backend.answer_approval("refund-882", "no", T0 + 6 * H) == "expired"
    assert backend.status().events["pending"] == 1  # one outcome, one event
    with pytest.raises(BadInput):
        backend.answer_approval("refund-882", "maybe", T0)


def test_timer_events_lists_what_a_timer_fired_and_nothing_else(backend: Store) -> None:
    backend.add_timer(DIGEST, T0)
    backend.add_timer(TimerSpec(name="digestA", due=T0, every=DAY), T0)  # a name just past it
    backend.add_timer(TimerSpec(name="dig", due=T0, every=DAY), T0)      # a name just before
    backend.ingest("chat", "digest@1", "{}", T0)                       # another source
    assert backend.tick(T0) == 3
    assert backend.tick(T0 + DAY) == 3
    events = backend.timer_events("digest")
    assert [e.source_id for e in events] == [f"digest@{T0}", f"digest@{T0 + DAY}"]
    assert all(e.source == "timer" for e in events)
    assert backend.timer_events("never-added") == []


@pytest.mark.parametrize(("limit", "owed", "alone", "coalesced"), [
    (3, 2, 2, None),   # under the limit: one event apiece
    (3, 3, 3, None),   # exactly the limit: one event apiece, none coalesced
    (3, 4, 2, 2),      # one past it: limit - 1 apiece, the other 2 in one (skipped 1)
    (1, 2, 0, 2),      # a limit of one coalesces every catch-up burst
    (1, 1, 1, None),
])
def test_catch_up_each_counts_up_to_the_limit_exactly(backend: Store, limit: int, owed: int,
                                                      alone: int, coalesced: int | None) -> None:
    spec = TimerSpec(name="bill", due=T0, every=H, payload="{}", catch_up="each")
    backend.add_timer(spec, T0)
    now = T0 + (owed - 1) * H  # ``owed`` occurrences are due, the first at T0
    assert backend.tick(now, Policy(catch_up_limit=limit)) == 1
    events = backend.timer_events("bill")
    bodies = [json.loads(e.payload) for e in events]
    assert [b["scheduled_for"] for b in bodies[:alone]] == [T0 + k * H for k in range(alone)]
    assert all(b["skipped"] == 0 for b in bodies[:alone])
    if coalesced is None:
        assert len(events) == alone
    else:
        assert len(events) == alone + 1
        assert (bodies[-1]["scheduled_for"], bodies[-1]["skipped"]) == (now, coalesced - 1)
    [timer] = backend.timers()
    assert timer.due == now + H


# -- calendar timers: a cron expression in a time zone ------------------------

NY = "America/New_York"
WEEKDAYS = TimerSpec(name="standup", due=1773057600, every=None, cron="0 8 * * 1-5", tz=NY)
MON_0800_EDT = 1773057600  # 2026-03-09, the Monday after clocks sprang forward


def local(at: int, tz: str = NY) -> str:
    return datetime.fromtimestamp(at, ZoneInfo(tz)).isoformat()


def cron_timer(name: str, cron: str, tz: str, now: int, catch_up: str = "coalesce") -> TimerSpec:
    return TimerSpec(name=name, due=cron_due(cron, tz, now), every=None, cron=cron, tz=tz,
                     catch_up=catch_up)


def test_a_cron_timer_keeps_its_expression_and_zone(backend: Store) -> None:
    assert backend.add_timer(WEEKDAYS, T0) == "added"
    [timer] = backend.timers()
    assert (timer.cron, timer.tz, timer.every, timer.due) == (
        "0 8 * * 1-5", NY, None, MON_0800_EDT)
    assert backend.add_timer(WEEKDAYS, T0 + 5) == "unchanged"
    elsewhere = WEEKDAYS._replace(tz="Europe/Berlin")
    with pytest.raises(NotAsAsked):
        backend.add_timer(elsewhere, T0)
    assert backend.add_timer(elsewhere, T0, replace=True) == "replaced"
    assert backend.timers()[0].tz == "Europe/Berlin"
    assert backend.status().next_timer == backend.timers()[0]


@pytest.mark.parametrize("spec", [
    WEEKDAYS._replace(tz=None), WEEKDAYS._replace(cron=None), WEEKDAYS._replace(every=DAY),
    WEEKDAYS._replace(cron="61 * * * *"), WEEKDAYS._replace(cron="0 8 * * 1-5 2026"),
    WEEKDAYS._replace(tz="Mars/Olympus"), WEEKDAYS._replace(event_source="x", event_id="y"),
], ids=["no-zone", "zone-alone", "also-every", "bad-minute", "six-fields", "bad-zone",
        "fixed-key"])
def test_a_bad_cron_timer_is_refused_and_nothing_is_stored(backend: Store,
                                                           spec: TimerSpec) -> None:
    with pytest.raises(BadInput):
        backend.add_timer(spec, T0)
    assert backend.timers(include_done=True) == []


def test_a_daily_cron_timer_fires_at_its_local_time_on_both_sides_of_a_change(
        backend: Store) -> None:
    added = 1772816400  # 2026-03-06 12:00 EST
    backend.add_timer(cron_timer("digest", "0 8 * * *", NY, added), added)
    times = []
    for _ in range(3):
        [timer] = backend.timers()
        assert backend.tick(timer.due - 1) == 0
        assert (backend.tick(timer.due), backend.tick(timer.due)) == (1, 0)
        times.append(timer.due)
        assert fired(backend, "digest", timer.due)["late_by"] == 0
    assert [local(t) for t in times] == [
        "2026-03-07T08:00:00-05:00", "2026-03-08T08:00:00-04:00", "2026-03-09T08:00:00-04:00"]
    assert [e.source_id for e in backend.timer_events("digest")] == [
        f"digest@{t}" for t in times]


def test_a_repeated_local_time_fires_once(backend: Store) -> None:
    added = 1793462400  # 2026-10-31 12:00 EDT; clocks fall back on 2026-11-01
    backend.add_timer(cron_timer("backup", "30 1 * * *", NY, added), added)
    first_pass = 1793511000  # 01:30 EDT
    assert backend.tick(first_pass) == 1
    assert backend.tick(first_pass + H) == 0  # 01:30 EST: the same wall-clock time again
    [timer] = backend.timers()
    assert local(timer.due) == "2026-11-02T01:30:00-05:00"


def test_a_four_day_outage_of_a_weekday_timer(backend: Store) -> None:
    backend.add_timer(WEEKDAYS, T0)
    backend.add_timer(WEEKDAYS._replace(name="billing", catch_up="each"), T0)
    back = MON_0800_EDT + 4 * DAY + H  # Friday 09:00 EDT
    assert backend.tick(back) == 2
    latest = fired(backend, "standup", MON_0800_EDT + 4 * DAY)
    assert (latest["skipped"], latest["late_by"]) == (4, H)
    days = [MON_0800_EDT + k * DAY for k in range(5)]  # all in daylight time
    assert [local(at) for at in days] == [f"2026-03-{d:02}T08:00:00-04:00" for d in range(9, 14)]
    assert [e.source_id for e in backend.timer_events("billing")] == [f"billing@{at}"
                                                                       for at in days]
    assert all(fired(backend, "billing", MON_0800_EDT + k * DAY)["skipped"] == 0
               for k in range(5))
    assert {local(t.due) for t in backend.timers()} == {"2026-03-16T08:00:00-04:00"}
    assert backend.status().events["pending"] == 6


def test_catch_up_each_of_a_cron_timer_is_bounded(backend: Store) -> None:
    backend.add_timer(WEEKDAYS._replace(catch_up="each"), T0)
    back = MON_0800_EDT + 14 * DAY + H  # ten weekdays later, on a Monday
    backend.tick(back, Policy(catch_up_limit=3))
    ids = [e.source_id for e in backend.timer_events("standup")]
    assert ids == [f"standup@{MON_0800_EDT}", f"standup@{MON_0800_EDT + DAY}",
                   f"standup@{MON_0800_EDT + 14 * DAY}"]
    assert fired(backend, "standup", MON_0800_EDT + 14 * DAY)["skipped"] == 8


def test_a_follow_up_cannot_replace_a_cron_schedule(backend: Store) -> None:
    backend.add_timer(WEEKDAYS, T0)
    with pytest.raises(BadInput) as refused:
        backend.add_timer(TimerSpec(name="standup", due=T0 + 60, every=None, follow_up=True), T0)
    assert str(refused.value) == ("a follow-up timer cannot replace timer 'standup': it is a "
                                  "recurring schedule")
    assert backend.timers()[0].cron == "0 8 * * 1-5"


# -- the bounds of a timer, and what a run's follow-up may replace -------------

def test_a_timer_name_is_one_to_two_hundred_characters_without_nul(backend: Store) -> None:
    longest = "n" * 200
    assert backend.add_timer(TimerSpec(name=longest, due=T0, every=None), T0) == "added"
    for name in ("", "n" * 201):
        with pytest.raises(BadInput) as refused:
            backend.add_timer(TimerSpec(name=name, due=T0, every=None), T0)
        assert str(refused.value) == "a timer name is 1-200 characters without NUL"
    for name in ("a\x00b", "\x00"):  # PostgreSQL refuses any NUL text before the rule does
        with pytest.raises(BadInput, match="NUL"):
            backend.add_timer(TimerSpec(name=name, due=T0, every=None), T0)
    assert [t.name for t in backend.timers()] == [longest]


def test_an_interval_is_at_least_a_second(backend: Store) -> None:
    for every in (0, -60):
        with pytest.raises(BadInput) as refused:
            backend.add_timer(TimerSpec(name="x", due=T0, every=every), T0)
        assert str(refused.value) == ("a timer's interval must be a positive number of "
                                      "seconds, at most a century")
    assert backend.add_timer(TimerSpec(name="x", due=T0, every=1), T0) == "added"
    assert backend.tick(T0 + 2) == 1
    assert fired(backend, "x", T0 + 2)["skipped"] == 2
    assert backend.timers()[0].due == T0 + 3


def test_a_follow_up_re_arms_a_one_off_but_never_an_approval_expiry(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="nudge", due=T0 + 60, every=None), T0)
    follow_up = TimerSpec(name="nudge", due=T0 + 600, every=None, follow_up=True)
    assert backend.add_timer(follow_up, T0, replace=True) == "replaced"
    assert [(t.name, t.due) for t in backend.timers()] == [("nudge", T0 + 600)]
    backend.request_approval("refund-1", T0, H, "refund")
    with pytest.raises(BadInput) as refused:
        backend.add_timer(follow_up._replace(name="expire:refund-1"), T0, replace=True)
    assert str(refused.value) == ("timer names beginning 'expire:' are kept for approvals' "
                                  "expiries")
    assert {t.name: t.due for t in backend.timers()} == {"nudge": T0 + 600,
                                                         "expire:refund-1": T0 + H}


def test_a_live_timer_changes_only_with_replace(backend: Store) -> None:
    backend.add_timer(TimerSpec(name="once", due=T0 + 60, every=None), T0)
    with pytest.raises(NotAsAsked) as refused:
        backend.add_timer(TimerSpec(name="once", due=T0 + 90, every=None), T0)
    assert str(refused.value) == ("timer 'once' exists with a different schedule or payload; "
                                  "use --replace to change it")
    assert backend.tick(T0 + 60) == 1  # spent: re-adding it needs no --replace
    assert backend.add_timer(TimerSpec(name="once", due=T0 + 90, every=None), T0 + 61) == "added"
    assert backend.timers()[0].due == T0 + 90


def test_re_adding_a_schedule_names_its_due_time_only_with_replace(backend: Store) -> None:
    backend.add_timer(DIGEST, T0)
    backend.tick(T0)  # the timer moved on to T0 + DAY
    assert backend.add_timer(DIGEST, T0 + 1) == "unchanged"  # the due time moves as it fires
    assert backend.add_timer(DIGEST, T0 + 1, replace=True) == "replaced"  # re-arms T0 on purpose
    assert backend.timers()[0].due == T0
    assert backend.add_timer(DIGEST, T0 + 2, replace=True) == "unchanged"


def test_a_timer_s_history_tells_each_add_firing_and_removal(backend: Store) -> None:
    def lines(name: str) -> list[tuple[int, str, str, str | None]]:
        return [(e.at, e.subject_id, e.action, e.detail) for e in backend.history("timer", name)]

    assert backend.add_timer(DIGEST, T0) == "added"
    assert backend.add_timer(DIGEST, T0 + 1) == "unchanged"  # writes no line
    assert backend.tick(T0 + 2 * DAY + 5) == 1  # two occurrences coalesced into the last
    [event] = backend.timer_events("digest")
    changed = DIGEST._replace(payload='{"task":"other"}')
    assert backend.add_timer(changed, T0 + 3 * DAY, replace=True) == "replaced"
    assert backend.remove_timer("digest", T0 + 3 * DAY + 1)
    assert lines("digest") == [
        (T0, "digest", "added", f"due {T0}"),
        (T0 + 2 * DAY + 5, "digest", "fired",
         f"scheduled for {T0 + 2 * DAY}, skipped 2: event {event.id} stored"),
        (T0 + 3 * DAY, "digest", "replaced", f"due {T0}"),
        (T0 + 3 * DAY + 1, "digest", "removed", None)]
    assert not backend.remove_timer("digest", T0 + 3 * DAY + 2)  # none left: no line
    assert len(lines("digest")) == 4

    once = TimerSpec(name="once", due=T0 + 60, every=None, payload='{"n":1}')
    backend.add_timer(once, T0)
    backend.tick(T0 + 60)
    [first] = backend.timer_events("once")
    # spent: it may be added again, and its occurrence's key is taken by then
    assert backend.add_timer(once._replace(payload='{"n":2}'), T0 + 61) == "added"
    assert backend.tick(T0 + 62) == 1
    assert backend.history("timer", "once")[-1] == Entry(
        T0 + 62, "timer", "once", "fired",
        None, f"scheduled for {T0 + 60}, skipped 0: event {first.id} conflict")
