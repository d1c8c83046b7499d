"""Sending the held messages: one dispatch, or watching until stopped.

The orchestration behind ``agentbox dispatch``, kept free of the CLI so the
scenario runner and the tests drive the same code. A dispatch is three
steps, and no lock is held while the sender runs: the rows are claimed under
a dispatch key in one short transaction, the sender runs, and its word is
settled in a second transaction (the rules are in
:mod:`agentbox.rules.outbox`).

A watching dispatcher (:meth:`Dispatcher.watch`) sends as soon as the gap
allows, an urgent message at once, and an at-least-once claim whose outcome
was not known once its deadline passes; it sleeps otherwise. Several may
watch one outbox: the claim decides which one sends.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from agentbox.clock import seconds_until
from agentbox.errors import AgentboxError, Busy, Exit
from agentbox.ledger.store import Store
from agentbox.process import CommandNotStarted, run_child
from agentbox.rules.outbox import Dispatch, Wait, sender_word
from agentbox.rules.policy import Policy
from agentbox.rules.records import DEFAULT_CHANNEL, SendOutcome
from agentbox.stopping import Interrupted, Stop

if TYPE_CHECKING:
    from datetime import tzinfo

    from agentbox.ledger.engine import Waiter
    from agentbox.rules.outbox import Settle
    from agentbox.rules.quiet import Limits, Window

INTERRUPTED = "dispatcher interrupted mid-send"
NOT_STARTED = "dispatch stopped before the sender ran"
LONGEST_SLEEP = 300.0  # seconds a watching dispatcher sleeps at most
IDLE_FLOOR = 0.05
# A watching dispatcher whose sends keep failing waits 1 s, 2 s, 4 s … up to this.
LONGEST_BACKOFF = 300.0


class Sent(NamedTuple):
    """How a try ended: the sender's word, whether it was recorded, and when."""

    outcome: SendOutcome
    error: str | None
    recorded: bool
    at: int

    def fate(self, dispatch: Dispatch) -> tuple[Settle, int | None]:
        """What the word did to the dispatch (the rule the store applied), and when
        its key is tried again, if it is."""
        from agentbox.rules.outbox import on_settle, resend_after

        action = on_settle("sending", dispatch.mode, dispatch.tries, dispatch.tries,
                           self.outcome, dispatch.max_tries)
        if action == "retry":  # only then: a resend time may not be computable (past 9999)
            return action, resend_after(self.at, dispatch.tries)
        return action, dispatch.deadline if action == "unknown" else None


@dataclass(frozen=True)
class DispatchReport:
    """What one dispatch did: how the try of a claim ended, or why nothing was claimed."""

    outcome: str  # sent | failed | unknown | interrupted (a claim); waiting | nothing
    dispatch: Dispatch | None = None
    sent: Sent | None = None  # a claim's try, as recorded
    wait: Wait | None = None
    signum: int | None = None  # the signal that interrupted it

    @property
    def exit_code(self) -> int:
        """0 when sent or nothing to send; 1 when a send did not go; 128 + the signal
        when a stop cut it short."""
        if self.outcome == "interrupted":
            return 128 + (self.signum or signal.SIGTERM)
        return Exit.OK if self.dispatch is None or self.outcome == "sent" else Exit.FAILURE


class Sender(Protocol):
    """Delivers a claimed body and gives its word: sent, failed, or not known."""

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        """The outcome, and the error when it is not ``sent``."""


@dataclass(frozen=True)
class CommandSender:
    """The user's sender command: the merged body on stdin, no shell."""

    argv: Sequence[str]
    timeout: int
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        """The body on stdin; in the environment, what the sender needs to dedupe and
        to tell a cut-short stdin (a dispatcher killed while writing it) from a shorter
        message: the key, the try, and the body's size and SHA-256."""
        import hashlib

        body = dispatch.body.encode("utf-8")
        env = {**self.env, "AGENTBOX_DISPATCH_KEY": dispatch.key,
               "AGENTBOX_DISPATCH_ATTEMPT": str(dispatch.tries),
               "AGENTBOX_DISPATCH_URGENT": "1" if dispatch.urgent else "0",
               "AGENTBOX_BODY_BYTES": str(len(body)),
               "AGENTBOX_BODY_SHA256": hashlib.sha256(body).hexdigest()}
        try:
            result = run_child(self.argv, body, env, self.timeout, label="sender")
        except CommandNotStarted as exc:
            return "failed", str(exc)
        outcome = sender_word(result.ok, result.returncode, result.timed_out, result.stopped)
        return outcome, None if outcome == "sent" else f"sender {result.describe()}"


@dataclass(frozen=True)
class PrintSender:
    """No sender command: writing the body out is the delivery."""

    write: Callable[[Dispatch], None]

    def send(self, dispatch: Dispatch) -> tuple[SendOutcome, str | None]:
        try:
            self.write(dispatch)
        except OSError as exc:  # a closed pipe: the body went nowhere
            return "failed", f"stdout closed: {exc.strerror or exc}"
        return "sent", None


@dataclass
class Dispatcher:
    """Sends one channel's held messages (``default``'s, unless told) through ``sender``.

    The channel's gap and delivery mode are the policy's ``outbox_gap`` and
    ``delivery``; its quiet hours and daily cap, read in ``zone``, are ``quiet``.
    """

    store: Store
    policy: Policy
    sender: Sender
    clock: Callable[[], int]
    stop: Stop = field(default_factory=Stop)
    channel: str = DEFAULT_CHANNEL
    quiet: Quiet | None = None
    #: Whose inbox it is and where ``serve`` is reached: what ``{approval:ID}`` links need.
    user: str = ""
    public_url: str | None = None

    def limits(self, now: int) -> Limits | None:
        """What holds this channel's messages at ``now`` besides the gap."""
        if self.quiet is None:
            return None
        return self.quiet.at(now)

    def claim(self) -> Dispatch | Wait:
        """Claim the next send (an overdue at-least-once resend first), or say why not."""
        now = self.clock()
        return self.store.claim_dispatch(now, self.policy.delivery,
                                         self.policy.outbox_gap, self.policy.send_timeout,
                                         self.policy.max_send_tries, self.channel,
                                         self.limits(now))

    def waiting(self) -> Wait | None:
        """Why this channel's held messages wait now, or None; reads only."""
        now = self.clock()
        return self.store.channel_wait(now, self.policy.outbox_gap, self.channel,
                                       self.limits(now))

    def deliver(self, dispatch: Dispatch) -> DispatchReport:
        """Run the sender on a claimed dispatch and settle its word."""
        try:
            dispatch = self.linked(dispatch)
        except AgentboxError as exc:  # nothing went out: a failed try, resent later
            return DispatchReport("failed", dispatch, self._settle(
                dispatch, "failed", f"cannot make the approval links: {exc}"))
        if self.stop.requested:  # the stop came during the claim: nothing went out
            return DispatchReport("interrupted", dispatch,
                                  self._settle(dispatch, "failed", NOT_STARTED),
                                  signum=self.stop.signum)
        try:
            with self.stop.interruptible():
                outcome, error = self.sender.send(dispatch)
        except Interrupted:  # the sender's group was stopped: it may have delivered
            sent = Sent("unknown", INTERRUPTED, False, self.clock())
            with contextlib.suppress(AgentboxError):
                sent = self._settle(dispatch, "unknown", INTERRUPTED)
            return DispatchReport("interrupted", dispatch, sent, signum=self.stop.signum)
        except BaseException:
            with contextlib.suppress(Exception):
                self._settle(dispatch, "unknown", INTERRUPTED)
            raise
        return DispatchReport(outcome, dispatch, self._settle(dispatch, outcome, error))

    def linked(self, dispatch: Dispatch) -> Dispatch:
        """The dispatch as it is sent: each ``{approval:ID}`` in its body made a link."""
        body = self.store.linked_body(dispatch.body, self.user, self.public_url, self.clock())
        return dispatch if body == dispatch.body else dispatch._replace(body=body)

    def dispatch_once(self) -> DispatchReport:
        claimed = self.claim()
        if isinstance(claimed, Wait):
            return DispatchReport("waiting" if claimed.held else "nothing", wait=claimed)
        return self.deliver(claimed)

    def _settle(self, dispatch: Dispatch, outcome: SendOutcome, error: str | None) -> Sent:
        """Record the word in a second transaction, saying so if the database would not."""
        now = self.clock()
        try:
            recorded = self.store.settle_dispatch(dispatch.key, outcome, now, error,
                                                  attempt=dispatch.tries)
        except Busy as exc:
            raise Busy(f"the send ended ({outcome}) but could not be recorded: {exc}; "
                       f"dispatch {dispatch.key} counts as not known after its claim "
                       "deadline") from None
        return Sent(outcome, error, recorded, now)

    # -- watching --------------------------------------------------------------

    def watch(self, emit: Callable[[DispatchReport], None]) -> None:
        """Send until stopped: at once when the gap allows, sleeping otherwise."""
        watch_channels([self], emit, self.stop)


def watch_channels(dispatchers: Sequence[Dispatcher], emit: Callable[[DispatchReport], None],
                   stop: Stop) -> None:
    """Send on every channel of one outbox until stopped: each channel as soon as its own
    gap, quiet hours and cap allow, none waiting for another; sleeping until the earliest
    of their next sends (or a change) otherwise. A channel whose sends keep failing is
    not hammered: it waits 1 s, 2 s, 4 s ... (at most :data:`LONGEST_BACKOFF`)."""
    store, clock = dispatchers[0].store, dispatchers[0].clock
    waiter = store.waiter()
    failures = {d.channel: 0 for d in dispatchers}
    resting: dict[str, float] = {}  # a failing channel's next try (monotonic)
    try:
        while not stop.requested:
            outbox = store.status().outbox
            if not (outbox["held"] or outbox["sending"]):
                _sleep(waiter, stop, None)  # nothing to send until something changes
                continue
            looks: list[int] = []
            sent = False
            for dispatcher in dispatchers:
                if stop.requested:
                    break
                rest = resting.get(dispatcher.channel, 0.0) - time.monotonic()
                if rest > 0:
                    looks.append(clock() + math.ceil(rest))
                    continue
                report = dispatcher.dispatch_once()
                if report.dispatch is None:
                    due = _next_look(report.wait)
                    if due is not None:
                        looks.append(due)
                    continue
                emit(report)
                sent = True
                failed = report.outcome == "failed"
                failures[dispatcher.channel] = failures[dispatcher.channel] + 1 if failed else 0
                if failed:
                    resting[dispatcher.channel] = time.monotonic() + min(
                        2.0 ** (failures[dispatcher.channel] - 1), LONGEST_BACKOFF)
            if not sent:
                _sleep(waiter, stop, min(looks) if looks else None)
    finally:
        waiter.close()


def _sleep(waiter: Waiter, stop: Stop, due: int | None) -> None:
    delay = LONGEST_SLEEP if due is None else min(LONGEST_SLEEP, seconds_until(due))
    with contextlib.suppress(Interrupted), stop.interruptible():
        waiter.wait(max(delay, IDLE_FLOOR))


@dataclass(frozen=True)
class Planned:
    """One channel as a dispatcher serves it: its policy (gap, mode), its quiet hours
    and daily cap, its own sender command (None: the caller's)."""

    name: str
    policy: Policy
    quiet: Quiet | None = None
    sender: list[str] | None = None


@dataclass(frozen=True)
class Quiet:
    """A channel's quiet hours and daily cap, in the inbox's zone."""

    zone: tzinfo
    window: Window | None = None
    max_per_day: int | None = None
    urgent_in_quiet_hours: bool = True

    def at(self, now: int) -> Limits | None:
        if self.window is None and self.max_per_day is None:
            return None
        from agentbox.rules.quiet import limits

        return limits(now, self.zone, self.window, self.max_per_day,
                      self.urgent_in_quiet_hours)


def _next_look(wait: Wait | None) -> int | None:
    """When a dispatch may next claim something: the gap ends, or a claim's deadline passes."""
    if wait is None:
        return None
    times = []
    if wait.held and wait.until is not None:
        times.append(wait.until)
    if wait.in_flight_until is not None:
        times.append(wait.in_flight_until + 1)
    return min(times) if times else None
