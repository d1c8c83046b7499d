"""`dispatch --watch`: a real dispatcher on the real clock, sending as soon as it may."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.outbox import CLAIM_GRACE
from support.processes import alive, wait_for
from support.store import outbox_states
from support.watching import Watcher

pytestmark = pytest.mark.slow

Queue = Callable[..., None]
QUICK = 5.0  # seconds: "at once", on a busy two-core machine
SEND_TIMEOUT = 60


def now() -> int:
    return int(time.time())


def start_dispatcher(start_watcher: Callable[..., Watcher], sender: Any, *flags: str,
                     wait: bool = False) -> Watcher:
    return start_watcher("dispatch", "--watch", *flags, "--", *sender.argv,
                         env=sender.env(wait=wait), name="dispatcher")


def sent(sender: Any, count: int, timeout: float = QUICK) -> list[dict[str, Any]]:
    wait_for(lambda: len(sender.calls()) >= count, f"send {count}", timeout)
    calls: list[dict[str, Any]] = sender.calls()
    return calls


def test_an_urgent_message_goes_at_once_and_takes_the_held_ones(
        cli_queue: Queue, inbox_store: Store, sender: Any, start_watcher: Any) -> None:
    dispatcher = start_dispatcher(start_watcher, sender, "--gap", "1h")
    cli_queue(now(), "first")
    [first] = sent(sender, 1)  # nothing was ever sent: no gap to wait out
    assert (first["body"], first["urgent"]) == ("first", "0")
    wait_for(lambda: outbox_states(inbox_store) == ["sent"], "the first send to be settled")
    cli_queue(now(), "second")
    began = time.monotonic()
    cli_queue(now(), "the site is down", urgent=True)
    [_, urgent] = sent(sender, 2)
    assert time.monotonic() - began < QUICK
    assert (urgent["body"], urgent["urgent"]) == ("second\n\nthe site is down", "1")
    wait_for(lambda: outbox_states(inbox_store) == ["sent"] * 3, "the urgent send to be settled")
    cli_queue(now(), "third")  # the hour counts from the urgent send: this one waits
    assert dispatcher.stop(signal.SIGTERM) == 0
    assert len(sender.calls()) == 2
    assert outbox_states(inbox_store) == ["sent", "sent", "sent", "held"]
    said = dispatcher.said()
    assert said.count("agentbox: sent dispatch") == 2 and "stopped by SIGTERM" in said


def test_a_held_message_goes_when_the_gap_ends(
        cli_queue: Queue, inbox_store: Store, sender: Any, start_watcher: Any) -> None:
    gap = 3
    dispatcher = start_dispatcher(start_watcher, sender, "--gap", f"{gap}s")
    cli_queue(now(), "a")
    [a] = sent(sender, 1)
    wait_for(lambda: outbox_states(inbox_store) == ["sent"], "the first send to be settled")
    cli_queue(now(), "b")
    [_, b] = sent(sender, 2, gap + QUICK)
    # The gap counts from the first claim (whole seconds): not before, and soon after.
    [claimed] = [e for e in inbox_store.history("dispatch", a["key"]) if e.action == "claimed"]
    claimed_at = claimed.at
    assert claimed_at + gap <= b["at"] <= claimed_at + gap + QUICK
    wait_for(lambda: outbox_states(inbox_store) == ["sent", "sent"],
             "the second send to be settled")
    assert dispatcher.stop(signal.SIGINT) == 0
    assert outbox_states(inbox_store) == ["sent", "sent"]


def test_an_overdue_at_least_once_claim_is_resent_under_the_same_key(
        cli_queue: Queue, inbox_store: Store, sender: Any, start_watcher: Any,
        home: Any) -> None:
    cli_queue(now(), "deploy finished")
    # A dispatcher claims the message as if 88 s ago and dies mid-send: its claim's
    # deadline (send_timeout + grace after the claim) passes 2 s from now.
    claimed_at = now() - SEND_TIMEOUT - CLAIM_GRACE + 2
    dying = start_watcher("dispatch", "--", *sender.argv, name="dying",
                          env={"AGENTBOX_NOW": str(claimed_at), **sender.env(wait=True)})
    [first] = sent(sender, 1)
    dying.proc.kill()
    dying.proc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(first["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(first["pid"]), "the first sender to die")

    dispatcher = start_dispatcher(start_watcher, sender)
    deadline = claimed_at + SEND_TIMEOUT + CLAIM_GRACE
    [_, again] = sent(sender, 2, 2 + 2 * QUICK)
    assert (again["key"], again["attempt"], again["body"]) == (
        first["key"], "2", "deploy finished")
    assert again["at"] >= deadline  # not before the claim was overdue
    wait_for(lambda: outbox_states(inbox_store) == ["sent"], "the resend to be settled")
    assert dispatcher.stop(signal.SIGTERM) == 0


def test_sigterm_mid_send_stops_the_sender_and_leaves_the_send_not_known(
        cli_queue: Queue, inbox_store: Store, sender: Any, start_watcher: Any) -> None:
    dispatcher = start_dispatcher(start_watcher, sender, wait=True)
    cli_queue(now(), "refund issued")
    [call] = sent(sender, 1)
    assert dispatcher.stop(signal.SIGTERM) == 0
    wait_for(lambda: not alive(call["pid"]), "the sender to be stopped", 30)
    [row] = inbox_store.outbox(("held", "sending", "sent", "uncertain"))
    # at-least-once: still claimed, resent under the same key once its deadline passes
    assert (row.state, row.error) == ("sending", "dispatcher interrupted mid-send")
    assert "outcome not known" in dispatcher.said()
