"""Times stay within the years 1970 to 9999: the clock, and every time a rule computes.

One rule (:func:`agentbox.clock.check_time`) says what a time may be; the
clock, timers, approvals, retries and dispatches each apply it where they
compute a time, and a recurring timer whose next occurrence would pass the
year 9999 is spent instead. The store-level tests are in
tests/contract/test_contract_time_bounds.py.
"""

from __future__ import annotations

import pytest

from agentbox import clock
from agentbox.calendar import Cron
from agentbox.errors import BadInput, Exit
from agentbox.rules import approvals, inbox, outbox, timers
from agentbox.rules.policy import Policy
from agentbox.rules.timers import Every, Timer

LAST = 253_402_300_799  # 9999-12-31T23:59:59Z
DAY = 86_400


def test_the_range_is_1970_to_the_end_of_9999() -> None:
    assert (clock.FIRST_TIME, clock.LAST_TIME) == (0, LAST)
    assert clock.check_time(0, "t") == 0 and clock.check_time(LAST, "t") == LAST
    for outside in (-1, LAST + 1, 2**63, -(2**63)):
        with pytest.raises(BadInput) as refused:
            clock.check_time(outside, "the thing's time would be")
        assert str(refused.value) == (f"the thing's time would be {outside}, outside the "
                                      f"years 1970 to 9999 (Unix seconds 0 to {LAST})")
        assert refused.value.exit_code == Exit.DATA


@pytest.mark.parametrize("pinned", ["0", "1700000000", str(LAST), "0001700000000"])
def test_agentbox_now_in_range_is_the_clock(monkeypatch: pytest.MonkeyPatch,
                                            pinned: str) -> None:
    monkeypatch.setenv("AGENTBOX_NOW", pinned)
    assert clock.now() == int(pinned)


@pytest.mark.parametrize("pinned", [
    " 5", "5 ", "\t5", "-5", "+5", "5_000", "1e3", "0x10", "5.0", "٣", "²", "soon",
    str(LAST + 1), str(2**63 - 1), str(-(2**40)), "9" * 5000])
def test_agentbox_now_is_plain_digits_within_the_range(monkeypatch: pytest.MonkeyPatch,
                                                       pinned: str) -> None:
    monkeypatch.setenv("AGENTBOX_NOW", pinned)
    with pytest.raises(BadInput) as refused:
        clock.now()
    message = str(refused.value)
    assert message.startswith("AGENTBOX_NOW must be Unix seconds in plain decimal digits")
    assert "\n" not in message and len(message) < 300


def test_an_interval_that_would_pass_the_year_9999_ends_the_schedule() -> None:
    assert Every(10).after(LAST - 10) == LAST
    assert Every(10).after(LAST - 9) is None
    assert Every(10).span(LAST - 25, LAST) == (LAST - 5, 2, None)
    assert Every(36_500 * DAY).span(LAST, LAST) == (LAST, 0, None)


def every_timer(due: int, every: int, catch_up: str = "coalesce") -> Timer:
    return Timer("t", due, every, "{}", catch_up, None, None, False, 0)


def test_a_timer_whose_next_occurrence_passes_9999_is_spent() -> None:
    assert timers.owed(every_timer(LAST, 36_500 * DAY), LAST, Policy()) == timers.Owed(
        ((LAST, 0),), None)
    each = timers.owed(every_timer(LAST - 2 * DAY - 5, DAY, "each"), LAST, Policy())
    assert each == timers.Owed(((LAST - 2 * DAY - 5, 0), (LAST - DAY - 5, 0), (LAST - 5, 0)),
                               None)


def test_a_cron_schedule_has_no_occurrence_past_9999() -> None:
    assert Cron("59 23 31 12 *", "UTC").span(LAST - 59 - 365 * DAY, LAST) == (LAST - 59, 1,
                                                                              None)


def test_a_timer_due_outside_the_range_is_refused() -> None:
    for due in (-1, LAST + 1):
        with pytest.raises(BadInput, match="timer 'x' would be due"):
            timers.check_spec(timers.TimerSpec("x", due, None))


def test_an_interval_longer_than_a_century_is_refused() -> None:
    timers.check_spec(timers.TimerSpec("x", 0, 36_500 * DAY))
    with pytest.raises(BadInput, match="at most a century"):
        timers.check_spec(timers.TimerSpec("x", 0, 36_500 * DAY + 1))


def test_an_approval_deadline_past_9999_is_refused() -> None:
    assert approvals.expiry_timer("a1", LAST - 3600, 3600, "ship").due == LAST
    with pytest.raises(BadInput, match="approval 'a1' would expire"):
        approvals.expiry_timer("a1", LAST - 3599, 3600, "ship")


def test_a_retry_past_9999_is_refused() -> None:
    policy = Policy(retry_backoff=60)
    assert inbox.after_failure(1, LAST - 60, policy).available_at == LAST
    with pytest.raises(BadInput, match="a retry"):
        inbox.after_failure(1, LAST - 59, policy)
    with pytest.raises(BadInput, match="a retry"):
        inbox.abandoned(1, 1, LAST - 59, policy)
    assert inbox.after_failure(1, LAST, Policy()).available_at == LAST  # no backoff: now


def test_a_dispatch_deadline_past_9999_is_refused() -> None:
    assert outbox.claim_deadline(LAST - 90, 60) == LAST
    with pytest.raises(BadInput, match="claim deadline"):
        outbox.claim_deadline(LAST - 89, 60)
    assert outbox.resend_after(LAST - 60, 2) == LAST
    with pytest.raises(BadInput, match="resend"):
        outbox.resend_after(LAST - 59, 2)


def test_a_dispatch_near_the_end_of_9999_reports_a_send_without_a_resend_time() -> None:
    from agentbox.dispatcher import Sent

    claimed = outbox.Dispatch("k", "at-least-once", "hi", (1,), False, tries=7,
                              deadline=LAST - 10, max_tries=9)
    assert Sent("sent", None, True, LAST - 100).fate(claimed) == ("sent", None)
    assert Sent("unknown", None, True, LAST - 100).fate(claimed) == ("unknown", LAST - 10)
    with pytest.raises(BadInput, match="resend"):  # a retry would have to be after 9999
        Sent("failed", "down", True, LAST - 100).fate(claimed)
