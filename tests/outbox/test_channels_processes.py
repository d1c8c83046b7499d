"""Channels with real dispatchers: two channels under one `dispatch --watch` on the real
clock, and dispatchers killed mid-send on each channel keeping its own promise."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentbox import paths
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.outbox import CLAIM_GRACE
from support.clock import T0
from support.processes import alive, wait_for
from support.store import run
from support.watching import Watcher

pytestmark = pytest.mark.slow
QUICK = 5.0  # seconds: "at once", on a busy two-core machine
SEND_TIMEOUT = 60


def config(sender: Any, extra: str) -> None:
    path = paths.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"sender = {json.dumps(sender.argv)}\nsend_timeout = \"{SEND_TIMEOUT}s\"\n"
                    + extra)


def speak(store: Store, now: int, *messages: tuple[str, str]) -> None:
    run(store, f"speaker-{now}-{len(messages)}", now,
        Answer(messages=tuple(Message(body, channel=channel) for body, channel in messages)))


def by_channel(sender: Any, channel: str) -> list[dict[str, Any]]:
    return [c for c in sender.calls() if c["channel"] == channel]


def test_two_channels_under_one_watch_neither_waits_for_the_other(
        inbox_store: Store, sender: Any, start_watcher: Callable[..., Watcher]) -> None:
    config(sender, 'outbox_gap = "1h"\n[channels.chat]\ngap = "2s"\n')
    watcher = start_watcher("dispatch", "--watch", env=sender.env(), name="dispatcher")
    wait_for(lambda: "channel chat" in watcher.said(), "the dispatcher to watch")
    speak(inbox_store, int(time.time()), ("mail 1", "default"), ("chat 1", "chat"))
    wait_for(lambda: len(sender.calls()) == 2, "a send on each channel", QUICK)
    wait_for(lambda: [m.state for m in inbox_store.outbox(("sent",))] == ["sent"] * 2,
             "both sends to be settled")
    speak(inbox_store, int(time.time()), ("mail 2", "default"), ("chat 2", "chat"))
    # The chat channel's 2 s gap ends long before the mail channel's hour.
    wait_for(lambda: len(by_channel(sender, "chat")) == 2, "chat's second send", 2 + QUICK)
    first, second = by_channel(sender, "chat")
    assert second["at"] - first["at"] >= 1  # its own gap, counted in whole seconds
    assert [c["body"] for c in by_channel(sender, "default")] == ["mail 1"]
    assert [m.body for m in inbox_store.outbox(("held",))] == ["mail 2"]
    assert watcher.stop(signal.SIGTERM) == 0


def start_dispatch(sender: Any, now: int, *flags: str, wait: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "AGENTBOX_NOW": str(now), **sender.env(wait=wait)}
    return subprocess.Popen([sys.executable, "-m", "agentbox", "dispatch", *flags],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_mid_send(sender: Any, now: int, channel: str) -> dict[str, Any]:
    before = len(sender.calls())
    proc = start_dispatch(sender, now, "--channel", channel, wait=True)
    try:
        wait_for(lambda: len(sender.calls()) > before, f"{channel}'s sender to start")
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    call: dict[str, Any] = sender.calls()[-1]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(call["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(call["pid"]), "the sender to die")
    return call


def test_dispatchers_killed_mid_send_keep_each_channels_promise(
        inbox_store: Store, sender: Any) -> None:
    config(sender, '[channels.mail]\ngap = "1s"\ndelivery = "at-least-once"\n'
                   '[channels.sms]\ngap = "1s"\ndelivery = "at-most-once"\n')
    rounds = 8
    for n in range(rounds):
        now = T0 + n * 1000
        speak(inbox_store, now, (f"mail {n}", "mail"), (f"sms {n}", "sms"))
        killed = {ch: kill_mid_send(sender, now, ch) for ch in ("mail", "sms")}
        later = start_dispatch(sender, now + SEND_TIMEOUT + CLAIM_GRACE + 1, wait=False)
        _, err = later.communicate(timeout=60)
        assert later.returncode == 0, err
        resent = by_channel(sender, "mail")[-1]
        assert (resent["key"], resent["attempt"]) == (killed["mail"]["key"], "2")
    mail, sms = by_channel(sender, "mail"), by_channel(sender, "sms")
    # at-least-once: every message reached its channel, each key tried twice at most.
    assert sorted({c["body"] for c in mail}) == sorted(f"mail {n}" for n in range(rounds))
    assert len(mail) == 2 * rounds
    # at-most-once: no message was tried twice; each waits for an operator.
    assert [c["body"] for c in sms] == [f"sms {n}" for n in range(rounds)]
    states = {m.body: m.state for m in inbox_store.outbox(("sent", "uncertain"))}
    assert all(states[f"mail {n}"] == "sent" for n in range(rounds))
    assert all(states[f"sms {n}"] == "uncertain" for n in range(rounds))
