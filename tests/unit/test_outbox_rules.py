"""The pure rule of what a sender's word does to a dispatch key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentbox.rules.outbox import RESEND_BACKOFF_CAP, on_expiry, on_settle, resend_after

MODES = st.sampled_from(["at-least-once", "at-most-once"])
OUTCOMES = st.sampled_from(["sent", "failed", "unknown"])


@given(mode=MODES, tries=st.integers(2, 50), max_tries=st.integers(1, 50), outcome=OUTCOMES)
def test_a_key_that_may_have_delivered_never_frees_its_rows(mode: str, tries: int,
                                                           max_tries: int,
                                                           outcome: str) -> None:
    action = on_settle("sending", mode, tries, tries, outcome, max_tries)  # type: ignore[arg-type]
    assert action != "failed"  # "failed" hands the rows to a new key
    if outcome != "sent" and tries >= max_tries:
        assert action == "park"


@given(mode=MODES, tries=st.integers(1, 50), max_tries=st.integers(1, 50))
def test_tries_are_bounded(mode: str, tries: int, max_tries: int) -> None:
    again = {"unknown", "retry"}
    for outcome in ("failed", "unknown"):
        action = on_settle("sending", mode, tries, tries, outcome, max_tries)  # type: ignore[arg-type]
        assert (action in again) <= (tries < max_tries and mode == "at-least-once")
    assert (on_expiry(mode, tries, max_tries) == "resend") == (
        mode == "at-least-once" and tries < max_tries)


def test_the_first_try_failing_for_certain_frees_the_rows() -> None:
    assert on_settle("sending", "at-least-once", 1, 1, "failed", 5) == "failed"
    assert on_settle("sending", "at-least-once", 1, 1, "unknown", 5) == "unknown"
    assert on_settle("sending", "at-least-once", 2, 2, "failed", 5) == "retry"
    assert on_settle("sending", "at-least-once", 1, 1, "unknown", 1) == "park"


def test_the_resend_backoff_doubles_up_to_its_cap() -> None:
    waits = [resend_after(0, tries) for tries in range(2, 12)]
    assert waits[:4] == [60, 120, 240, 480]
    assert waits == sorted(waits) and waits[-1] == RESEND_BACKOFF_CAP
