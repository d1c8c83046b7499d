"""The pure rules at their edges: boundaries, the words they leave behind, the rare paths.

Each of these is seen by a user somewhere (a history line, an error, `doctor`,
when a retry or a prune happens); the contract suite checks the same rules
through the store, where the backends apply them.
"""

from __future__ import annotations

import re

import pytest

from agentbox.errors import BadInput
from agentbox.rules import inbox, keys, lease, outbox, retention, timers
from agentbox.rules.policy import Policy
from agentbox.rules.records import Lease
from agentbox.rules.retention import PruneCounts
from agentbox.rules.timers import Timer, TimerSpec

# -- lease ---------------------------------------------------------------------

def test_a_lease_is_taken_up_to_and_including_its_last_second() -> None:
    held = Lease("w", 1, 100)
    assert [lease.taken(held, now) for now in (99, 100, 101)] == [True, True, False]
    assert not lease.taken(None, 0)
    assert not lease.taken(held._replace(released=True), 50)


def test_a_holder_id_is_host_pid_and_eight_random_hex_digits() -> None:
    first, second = lease.new_holder_id(), lease.new_holder_id()
    assert re.fullmatch(r"[^:]+:\d+:[0-9a-f]{8}", first), first
    assert first != second and first.rsplit(":", 1)[0] == second.rsplit(":", 1)[0]


# -- keys ------------------------------------------------------------------------

def test_a_delivery_may_not_use_a_source_agentbox_writes_itself() -> None:
    keys.check_delivery_key("github", "d-1")
    with pytest.raises(BadInput) as refused:
        keys.check_delivery_key("timer", "t@1")
    assert str(refused.value) == ("source 'timer' is kept for agentbox's own events; use "
                                  "`agentbox schedule` instead")


def test_a_conflict_names_the_refused_payload_by_a_short_digest() -> None:
    assert keys.conflict_detail("{}") == "refused a different payload (sha256 44136fa355b3678a…)"


# -- inbox -----------------------------------------------------------------------

def test_the_words_of_an_exhausted_event() -> None:
    assert inbox.exhausted(3, None) == "too many attempts (3)"
    assert inbox.exhausted(3, "") == "too many attempts (3)"
    assert inbox.exhausted(3, "boom") == "too many attempts (3); last: boom"


def test_a_stop_gives_one_attempt_back_and_never_goes_below_none() -> None:
    assert [inbox.given_back(n) for n in (0, 1, 2, 5)] == [0, 0, 1, 4]


def test_events_left_running_count_from_the_end_of_a_live_lease_only() -> None:
    live = Lease("w", 1, 100)
    assert inbox.next_work(None, None, True, live, 50) == 101
    assert inbox.next_work(None, None, True, None, 50) == 50
    assert inbox.next_work(None, None, True, live._replace(released=True), 50) == 50
    assert inbox.next_work(None, None, True, live, 101) == 101  # expired: at once
    assert inbox.next_work(None, None, False, live, 50) is None
    assert inbox.next_work(70, 60, True, live, 50) == 60


# -- policy ------------------------------------------------------------------------

def test_the_retry_backoff_is_off_at_zero_and_doubles_from_the_first_attempt() -> None:
    on = Policy(retry_backoff=1, backoff_cap=100)
    assert [on.backoff(n) for n in (0, 1, 2, 3, 8)] == [0, 1, 2, 4, 100]
    for off in (Policy(retry_backoff=0), Policy(retry_backoff=-5)):
        assert [off.backoff(n) for n in (0, 1, 3)] == [0, 0, 0]
    assert [Policy(retry_backoff=30).backoff(n) for n in (-1, 0, 1)] == [0, 0, 30]


# -- outbox ------------------------------------------------------------------------

def test_a_claim_needs_a_known_mode_a_gap_a_timeout_and_a_try() -> None:
    outbox.check_claim("at-most-once", 0, 1, 1)  # the least of each that is allowed
    for args, why in (
            (("exactly-once", 0, 1, 1), "a delivery mode is one of at-least-once, "
                                        "at-most-once, not 'exactly-once'"),
            (("at-least-once", -1, 1, 1), "the gap cannot be negative and the timeout must "
                                          "be positive"),
            (("at-least-once", 0, 0, 1), "the gap cannot be negative and the timeout must "
                                         "be positive"),
            (("at-least-once", 0, 1, 0), "a dispatch key needs at least one try")):
        with pytest.raises(BadInput) as refused:
            outbox.check_claim(*args)  # type: ignore[arg-type]
        assert str(refused.value) == why


def test_what_a_sender_s_exit_says() -> None:
    assert outbox.sender_word(True, 0, False, False) == "sent"
    assert outbox.sender_word(False, 1, False, False) == "failed"
    assert outbox.sender_word(False, 0, False, False) == "failed"  # not ok, yet exit 0
    for returncode, timed_out, stopped in ((1, True, False), (1, False, True), (None, False,
                                                                               False),
                                           (-9, False, False)):
        assert outbox.sender_word(False, returncode, timed_out, stopped) == "unknown"


def test_an_unknown_word_is_refused() -> None:
    with pytest.raises(BadInput) as refused:
        outbox.on_settle("sending", "at-least-once", 1, 1, "lost")  # type: ignore[arg-type]
    assert str(refused.value) == "unknown dispatch outcome 'lost'"


def test_why_a_key_is_parked_or_kept() -> None:
    assert outbox.on_expiry("at-most-once", 1, 5) == "park"
    assert outbox.on_expiry("at-least-once", 5, 5) == "park"
    assert outbox.expiry_reason("at-most-once", 1, 5) == (
        "claim deadline passed with the outcome unknown")
    assert outbox.expiry_reason("at-least-once", 5, 5) == (
        "claim deadline passed with the outcome unknown after try 5 of 5: no more tries")
    assert outbox.park_reason("at-most-once", None, 1, 5) == "outcome unknown"
    assert outbox.park_reason("at-most-once", "killed", 1, 5) == "killed"
    assert outbox.park_reason("at-least-once", None, 5, 5) == (
        "outcome unknown (try 5 of 5: no more tries)")
    assert outbox.retry_detail(2, 5, "exit 1") == (
        "try 2 of 5: exit 1; kept under the same key, which may have delivered already")
    assert outbox.resend_detail(2, 5) == "try 2 of 5 under the same key"


# -- retention ---------------------------------------------------------------------

def test_the_cutoffs_of_a_prune() -> None:
    policy = Policy(keep_done=10, keep_sent=20, outbox_gap=30, dedupe_window=40)
    assert retention.cutoffs(1000, policy) == retention.Cutoffs(
        now=1000, done_before=990, sent_before=980, dispatch_before=970, window=40,
        usage_before=1000 - 2 * 86_400)  # a day's budget still reads the last two days
    assert retention.cutoffs(10**7, Policy(keep_done=3 * 86_400)).usage_before == (
        10**7 - 3 * 86_400)
    cut = retention.cutoffs(1000, policy)
    assert [cut.remembered_until(at) for at in (959, 960, 961)] == [None, None, 1001]


def test_a_prune_is_due_once_a_day_or_when_the_clock_went_back() -> None:
    day, policy = retention.PRUNE_EVERY, Policy()
    assert retention.prune_due(None, 0, policy)
    assert not retention.prune_due(1000, 1000 + day - 1, policy)
    assert retention.prune_due(1000, 1000 + day, policy)
    assert not retention.prune_due(1000, 1000, policy)
    assert retention.prune_due(1000, 999, policy)
    assert not retention.prune_due(None, 0, Policy(auto_prune=False))
    assert not retention.prune_due(1000, 1000 + 2 * day, Policy(auto_prune=False))


def test_prune_counts_add_up_field_by_field() -> None:
    total = PruneCounts(1, 2, 3, 4, 5).plus(PruneCounts(10, 20, 30, 40, 50))
    assert total == PruneCounts(11, 22, 33, 44, 55) and total.total == 165


# -- timers ------------------------------------------------------------------------

def spec(**changes: object) -> TimerSpec:
    return TimerSpec(name="t", due=0, every=60)._replace(**changes)


@pytest.mark.parametrize(("bad", "why"), [
    (spec(catch_up="sometimes"), "a catch-up mode is one of coalesce, each, not 'sometimes'"),
    (spec(every=None, cron="* * * * *"), "a cron timer needs both an expression and a time zone"),
    (spec(every=None, tz="UTC"), "a cron timer needs both an expression and a time zone"),
    (spec(cron="* * * * *", tz="UTC"),
     "a timer repeats every so often or on a cron schedule, not both"),
    (spec(event_source="approval", event_id="r"), "a recurring timer cannot use a fixed event key"),
    (spec(every=None, cron="* * * * *", tz="UTC", event_source="approval", event_id="r"),
     "a recurring timer cannot use a fixed event key"),
    (spec(payload='{"late_by":1,"scheduled_for":2,"x":3}'),
     "a timer payload cannot use the key(s) late_by, scheduled_for: the scheduler sets them "
     "on every event"),
])
def test_a_bad_timer_says_why(bad: TimerSpec, why: str) -> None:
    with pytest.raises(BadInput) as refused:
        timers.check_spec(bad)
    assert str(refused.value) == why


def test_a_cron_timer_that_never_comes_again_is_refused() -> None:
    with pytest.raises(BadInput) as refused:
        timers.cron_due("0 0 1 1 *", "UTC", 253_402_300_000)  # late in the year 9999
    assert str(refused.value) == (
        "cron expression '0 0 1 1 *' never matches again before the year 10000")


class Ending:
    """A schedule with three occurrences, 10 s apart, and then none."""

    def after(self, at: int) -> int | None:
        return at + 10 if at < 20 else None

    def span(self, first: int, now: int) -> tuple[int, int, int | None]:
        raise AssertionError("not needed")


def test_taking_occurrences_stops_where_the_schedule_ends() -> None:
    assert timers._take(Ending(), 0, 5) == [0, 10, 20]
    assert timers._take(Ending(), 0, 2) == [0, 10]
    assert timers._take(Ending(), 0, 0) == []


def test_a_one_off_has_no_schedule_and_an_interval_repeats_by_itself() -> None:
    one_off = Timer("t", 0, None, "{}", "coalesce", None, None, False, 0)
    assert timers.schedule(one_off) is None
    assert timers.schedule(one_off._replace(every=60)) == timers.Every(60)
