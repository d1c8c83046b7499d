"""The paced outbox: when held messages may go out, and what a sender's word means.

Held messages go out merged into one body, at most once per ``gap`` counted
from the last send of any kind (a failed send, or one an operator resolved as
unsent, does not count); an urgent message bypasses the gap and takes the
other held messages with it. A send never holds a lock while the sender
runs: rows are claimed under a dispatch key with a deadline, the sender
runs, the outcome is settled. A claim whose outcome is not known is resent
under the same key after its deadline (``at-least-once``) or parked as
``uncertain`` for an operator (``at-most-once``).

Once a key may have delivered (a try's outcome was not known), its messages
never leave it: a later try that certainly failed keeps them under the same
key, tried again after a backoff, so a channel deduping on the key cannot
deliver them twice. A key gets ``max_tries`` tries in all (recorded on the
claim, like the mode); then it is parked ``uncertain`` for an operator
(``outbox resolve``) instead of being tried for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from agentbox.clock import check_time
from agentbox.errors import BadInput
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.quiet import Limits
from agentbox.rules.records import DELIVERY_MODES, SendOutcome


class Wait(NamedTuple):
    """Nothing was claimed.

    ``until`` is when the gap allows the next send (None: no send yet);
    ``in_flight`` counts claims still inside their deadline, the earliest of
    which is ``in_flight_until``.
    """

    held: int
    until: int | None
    in_flight: int = 0
    in_flight_until: int | None = None
    reason: str | None = None  # what holds them: "gap", "quiet hours" or "max_per_day"


class OutboxMessage(NamedTuple):
    id: int
    body: str
    urgent: bool
    state: str
    dispatch_key: str | None
    created_at: int
    sent_at: int | None
    error: str | None
    channel: str = "default"


class Dispatch(NamedTuple):
    """A claimed send: these rows, merged into ``body``, under ``key``, try ``tries``.

    ``tries`` counts the key's tries, this one included: it is the number of this
    try, which the sender sees as AGENTBOX_DISPATCH_ATTEMPT and a settle names as
    its ``attempt``; ``max_tries`` (the ``max_send_tries`` setting) bounds it.
    """

    key: str
    mode: str
    body: str
    message_ids: tuple[int, ...]
    urgent: bool
    tries: int
    deadline: int
    max_tries: int = DEFAULT_MAX_SEND_TRIES  # tries of this key, then uncertain (on the claim)
    channel: str = "default"

    @property
    def resend(self) -> bool:
        return self.tries > 1


SEPARATOR = "\n\n"
CLAIM_GRACE = 30  # seconds past the send timeout before a claim counts as abandoned
# Dispatch states after which the channel may have heard from us: the gap counts from them.
SPOKE_STATES = ("sending", "sent", "uncertain")
RESEND_BACKOFF = 60  # seconds before a key whose try failed is tried again; doubles per try
RESEND_BACKOFF_CAP = 3600

Settle = Literal["sent", "late-sent", "failed", "retry", "park", "unknown", "stale"]


def check_mode(mode: str) -> None:
    if mode not in DELIVERY_MODES:
        raise BadInput(f"a delivery mode is one of {', '.join(DELIVERY_MODES)}, not {mode!r}")


def check_claim(mode: str, gap: int, timeout: int,
                max_tries: int = DEFAULT_MAX_SEND_TRIES) -> None:
    check_mode(mode)
    if gap < 0 or timeout <= 0:
        raise BadInput("the gap cannot be negative and the timeout must be positive")
    if max_tries < 1:
        raise BadInput("a dispatch key needs at least one try")


def may_have_delivered(tries: int) -> bool:
    """Whether an earlier try of a key may have reached the channel.

    A key is tried again only after a try whose outcome was not known (the
    sender was stopped or killed, or its dispatcher died), so any key past
    its first try may already have delivered.
    """
    return tries > 1


def next_allowed(last_send: int | None, gap: int) -> int | None:
    """When the gap lets the next send go; None when nothing was ever sent."""
    return None if last_send is None else last_send + gap


def may_send(urgent: Sequence[bool], last_send: int | None, gap: int, now: int) -> bool:
    """Held messages (their urgent flags) go now if any is urgent or the gap has passed."""
    if not urgent:
        return False
    allowed = next_allowed(last_send, gap)
    return any(urgent) or allowed is None or now >= allowed


def held_by(urgent: Sequence[bool], last_send: int | None, gap: int, now: int,
            limits: Limits, sent_in: Callable[[tuple[int, int]], int],
            ) -> tuple[str, int | None] | None:
    """Why a channel's held messages (their urgent flags) may not go now, and until
    when; None when they may.

    Quiet hours hold non-urgent messages until they end, an urgent one too when
    ``urgent_in_quiet_hours`` is off. ``max_per_day`` holds non-urgent ones once
    the local day's sends (urgent ones counted; ``sent_in(day)``, asked only
    then) reach it, until the next day. Then the gap, which an urgent message
    bypasses.
    """
    if not urgent:
        return None
    if limits.quiet_until is not None and (not any(urgent)
                                           or not limits.urgent_in_quiet_hours):
        return "quiet hours", limits.quiet_until
    if any(urgent):
        return None
    if (limits.max_per_day is not None and limits.day is not None
            and sent_in(limits.day) >= limits.max_per_day):
        return "max_per_day", limits.day[1]
    if not may_send(urgent, last_send, gap, now):
        return "gap", next_allowed(last_send, gap)
    return None


def merged(bodies: Sequence[str]) -> str:
    return SEPARATOR.join(bodies)


def claim_deadline(now: int, timeout: int) -> int:
    """When a claim with no word from its sender counts as abandoned."""
    return check_time(now + timeout + CLAIM_GRACE, "a dispatch's claim deadline would be")


def dispatch_key(prefix: str, seq: int) -> str:
    """Unique per inbox and never reused, across restores too (``prefix`` is the
    inbox's key prefix of the moment, Core.key_prefix): the channel dedupes on it."""
    return f"{prefix}-{seq}"


def sender_word(ok: bool, returncode: int | None, timed_out: bool, stopped: bool) -> SendOutcome:
    """Exit 0 = delivered; a non-zero exit = certainly not; stopped or killed = not known."""
    if ok:
        return "sent"
    if timed_out or stopped or returncode is None or returncode < 0:
        return "unknown"
    return "failed"


def on_settle(state: str, mode: str, tries: int, attempt: int, outcome: SendOutcome,
              max_tries: int = DEFAULT_MAX_SEND_TRIES) -> Settle:
    """What the sender's word for try ``attempt`` does to a dispatch in ``state``.

    A word for a try that is no longer current (settled, parked, or taken over
    by another dispatcher) changes nothing, except a certain delivery: the
    channel has the message whichever try brought it. For the current try:

    - ``sent``: the dispatch is sent;
    - ``failed`` of a key that cannot have delivered: its rows are held again
      and may go out later under a new key;
    - ``failed`` of a key that may have delivered: ``retry``, kept under the
      key and tried again after :func:`resend_after`;
    - not known: ``unknown``, resent under the key after the claim deadline
      (at-least-once), or ``park``: uncertain (at-most-once);
    - ``park`` too, whatever the word, once a key has had ``max_tries`` tries.
    """
    if outcome not in ("sent", "failed", "unknown"):
        raise BadInput(f"unknown dispatch outcome {outcome!r}")
    if state != "sending" or tries != attempt:
        return "late-sent" if outcome == "sent" and state in ("sending", "uncertain") else "stale"
    if outcome == "sent":
        return "sent"
    if outcome == "failed" and not may_have_delivered(tries):
        return "failed"
    if mode == "at-most-once" or tries >= max_tries:
        return "park"
    return "retry" if outcome == "failed" else "unknown"


def on_expiry(mode: str, tries: int, max_tries: int) -> Literal["resend", "park"]:
    """A claim past its deadline with no word (its dispatcher died): at-least-once
    resends it under its key while it has tries left; otherwise it is parked."""
    return "resend" if mode == "at-least-once" and tries < max_tries else "park"


def expiry_reason(mode: str, tries: int, max_tries: int) -> str:
    """Why a claim past its deadline with no word is parked (see :func:`on_expiry`)."""
    if mode == "at-most-once":
        return "claim deadline passed with the outcome unknown"
    return (f"claim deadline passed with the outcome unknown after try {tries} of "
            f"{max_tries}: no more tries")


def park_reason(mode: str, error: str | None, tries: int, max_tries: int) -> str:
    """Why a settled try parks its key: the sender's word, and for at-least-once
    (which parks only when out of tries) that no try is left."""
    said = error or "outcome unknown"
    if mode == "at-least-once":
        return f"{said} (try {tries} of {max_tries}: no more tries)"
    return said


def resend_detail(tries: int, max_tries: int) -> str:
    """The history line of a take-over: try ``tries`` of a key."""
    return f"try {tries} of {max_tries} under the same key"


def retry_detail(tries: int, max_tries: int, error: str | None) -> str:
    """The history line of a failed try kept under its key (see ``retry`` in
    :func:`on_settle`)."""
    return (f"try {tries} of {max_tries}: {error}; kept under the same key, which may have "
            "delivered already")


def resend_after(now: int, tries: int) -> int:
    """When a key whose try ``tries`` certainly failed (having maybe delivered
    before) is tried again: 60 s after the second try, doubling, at most 1 h."""
    wait: int = RESEND_BACKOFF * 2 ** min(max(tries - 2, 0), 16)
    return check_time(now + min(wait, RESEND_BACKOFF_CAP), "a dispatch's resend would be at")
