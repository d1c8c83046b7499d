"""Store contract: channels — what holds a channel's held messages, read without a claim
(`outbox` and `status`), and the daily cap that counts a channel's sends of one day."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.outbox import Dispatch, Wait
from agentbox.rules.quiet import Limits
from support.clock import T0
from support.store import outbox_states, run

GAP = 3600
TIMEOUT = 60
DAY = 86_400


def speak(store: Store, now: int, *messages: Message) -> None:
    """Queue messages, on any channel, as the answer of a finished run."""
    run(store, f"speaker-{now}-{len(messages)}", now, Answer(messages=messages))


def claimed(store: Store, now: int, channel: str = "default", gap: int = GAP,
            limits: Limits | None = None, mode: str = "at-least-once") -> Dispatch:
    got = store.claim_dispatch(now, mode, gap, TIMEOUT, channel=channel, limits=limits)
    assert isinstance(got, Dispatch), got
    return got


def sent(store: Store, now: int, channel: str = "default", gap: int = GAP,
         limits: Limits | None = None) -> Dispatch:
    got = claimed(store, now, channel, gap, limits)
    assert store.settle_dispatch(got.key, "sent", now, attempt=got.tries)
    return got


def test_a_channel_s_wait_is_what_a_claim_would_find_and_claims_nothing(
        backend: Store) -> None:
    assert backend.channel_wait(T0, GAP) == Wait(0, None)  # nothing held, nothing sent
    speak(backend, T0, Message("a"), Message("b", channel="sms"))
    assert backend.channel_wait(T0, GAP) is None  # nothing sent yet: they may go
    assert backend.channel_wait(T0, GAP, "sms") is None
    assert outbox_states(backend) == ["held", "held"]  # a read: nothing was claimed
    sent(backend, T0)
    speak(backend, T0 + 10, Message("c"))
    waiting = backend.channel_wait(T0 + 10, GAP)
    assert waiting == Wait(1, T0 + GAP, 0, None, "gap")
    assert backend.claim_dispatch(T0 + 10, "at-least-once", GAP, TIMEOUT) == waiting
    assert backend.channel_wait(T0 + GAP - 1, GAP) == Wait(1, T0 + GAP, 0, None, "gap")
    assert backend.channel_wait(T0 + GAP, GAP) is None  # the gap is over
    assert backend.channel_wait(T0 + 10, 10) is None  # the gap asked for, not another
    assert backend.channel_wait(T0 + 10, GAP, "sms") is None  # sms sent nothing yet


def test_a_channel_s_wait_counts_its_own_claims_in_flight(backend: Store) -> None:
    speak(backend, T0, Message("a"), Message("b", channel="sms"))
    on_sms = claimed(backend, T0, "sms")  # its sender has not said yet: it may have spoken
    assert backend.channel_wait(T0 + 1, GAP, "sms") == Wait(0, T0 + GAP, 1, on_sms.deadline)
    assert backend.channel_wait(T0 + 1, GAP) is None  # default has no claim out
    speak(backend, T0 + 2, Message("c", channel="sms"))
    assert backend.channel_wait(T0 + 2, GAP, "sms") == Wait(1, T0 + GAP, 1, on_sms.deadline,
                                                            "gap")


def test_an_urgent_held_message_goes_through_the_gap_of_its_channel(backend: Store) -> None:
    speak(backend, T0, Message("first"))
    sent(backend, T0)
    speak(backend, T0 + 5, Message("routine"))
    assert backend.channel_wait(T0 + 5, GAP) == Wait(1, T0 + GAP, 0, None, "gap")
    speak(backend, T0 + 6, Message("the site is down", urgent=True))
    assert backend.channel_wait(T0 + 6, GAP) is None


def test_a_channel_s_wait_heeds_its_quiet_hours(backend: Store) -> None:
    quiet = Limits(quiet_until=T0 + 500)
    speak(backend, T0, Message("night"))
    assert backend.channel_wait(T0, GAP, limits=quiet) == Wait(1, T0 + 500, 0, None,
                                                               "quiet hours")
    assert backend.channel_wait(T0, GAP) is None  # without them it may go


def test_the_daily_cap_counts_the_channel_s_sends_that_may_have_spoken(
        backend: Store) -> None:
    """Sent, sending and uncertain sends of the channel claimed within the local day
    count (an urgent one too); a failed send and another channel's sends do not."""
    cap = Limits(day=(T0, T0 + DAY), max_per_day=2)
    speak(backend, T0, Message("one", urgent=True))
    sent(backend, T0, gap=0, limits=cap)  # claimed at the day's very start: it counts
    speak(backend, T0 + 1, Message("two"), Message("x", channel="sms"))
    failed = claimed(backend, T0 + 1, gap=0, limits=cap)
    assert backend.settle_dispatch(failed.key, "failed", T0 + 1, "exit 1", attempt=1)
    sent(backend, T0 + 1, "sms", gap=0, limits=cap)
    speak(backend, T0 + 1, Message("y", channel="sms"))
    sent(backend, T0 + 1, "sms", gap=0)
    assert backend.channel_wait(T0 + 2, 0, limits=cap) is None  # one counted of two
    unsure = claimed(backend, T0 + 2, gap=0, limits=cap, mode="at-most-once")
    assert backend.settle_dispatch(unsure.key, "unknown", T0 + 2, "timed out", attempt=1)
    speak(backend, T0 + 3, Message("three"))
    capped = Wait(1, T0 + DAY, 0, None, "max_per_day")
    assert backend.channel_wait(T0 + 3, 0, limits=cap) == capped
    assert backend.claim_dispatch(T0 + 3, "at-least-once", 0, TIMEOUT, limits=cap) == capped
    speak(backend, T0 + 3, Message("z", channel="sms"))  # sms counts its own two
    assert backend.channel_wait(T0 + 3, 0, "sms", limits=cap) == capped
    # a day that starts after the first send counts only the uncertain one
    later = cap._replace(day=(T0 + 1, T0 + 1 + DAY))
    assert backend.channel_wait(T0 + 3, 0, limits=later) is None
    flight = claimed(backend, T0 + 3, gap=0, limits=later)  # sending counts too
    speak(backend, T0 + 4, Message("four"))
    assert backend.channel_wait(T0 + 4, 0, limits=later) == Wait(
        1, T0 + 1 + DAY, 1, flight.deadline, "max_per_day")


def test_a_cap_without_a_day_holds_nothing(backend: Store) -> None:
    speak(backend, T0, Message("one"))
    sent(backend, T0, gap=0)
    speak(backend, T0 + 1, Message("two"))
    assert backend.channel_wait(T0 + 1, 0, limits=Limits(max_per_day=1)) is None


def test_channels_held_counts_each_channel_s_held_messages(backend: Store) -> None:
    assert backend.channels_held() == {}
    speak(backend, T0, Message("a"), Message("b"), Message("c", channel="sms"),
          Message("d", channel="alerts"))
    assert list(backend.channels_held().items()) == [("alerts", 1), ("default", 2),
                                                      ("sms", 1)]
    sent(backend, T0, "alerts")
    claimed(backend, T0, "sms")  # sending is not held
    assert list(backend.channels_held().items()) == [("default", 2)]


def test_a_channel_takes_over_only_its_own_abandoned_claims(backend: Store) -> None:
    speak(backend, T0, Message("by sms", channel="sms"))
    lost = claimed(backend, T0, "sms")  # its dispatcher dies
    speak(backend, T0 + 1, Message("by mail"))
    mail = claimed(backend, lost.deadline + 1)  # default's own message, not sms's resend
    assert (mail.body, mail.channel, mail.tries) == ("by mail", "default", 1)
    assert mail.key != lost.key
    resend = claimed(backend, lost.deadline + 2, "sms")
    assert (resend.key, resend.body, resend.channel, resend.tries) == (
        lost.key, "by sms", "sms", 2)


def test_the_outbox_lists_each_message_with_its_channel(backend: Store) -> None:
    speak(backend, T0, Message("a"), Message("b", channel="sms"), Message("c", urgent=True,
                                                                       channel="alerts"))
    assert [(m.body, m.urgent, m.channel) for m in backend.outbox()] == [
        ("a", False, "default"), ("b", False, "sms"), ("c", True, "alerts")]
    assert [m.body for m in backend.outbox(limit=2)] == ["b", "c"]  # the newest, oldest first


def test_a_claim_names_its_channel_and_urgency_and_needs_a_try(backend: Store) -> None:
    speak(backend, T0, Message("down", urgent=True, channel="sms"))
    with pytest.raises(BadInput, match=r"^a dispatch key needs at least one try$"):
        backend.claim_dispatch(T0, "at-least-once", GAP, TIMEOUT, max_tries=0, channel="sms")
    assert outbox_states(backend) == ["held"]  # refused before anything was claimed
    got = claimed(backend, T0, "sms")
    assert (got.channel, got.urgent, got.body) == ("sms", True, "down")
    [line] = [e for e in backend.history("dispatch", got.key) if e.action == "claimed"]
    assert line.detail == "1 message(s), at-least-once, urgent"
