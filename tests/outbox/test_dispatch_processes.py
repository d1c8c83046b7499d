"""Real processes and real signals: a dispatcher killed mid-send, racing dispatchers,
and the write lock staying free while a sender runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.outbox import CLAIM_GRACE
from support.clock import T0
from support.processes import alive, finish_proc, wait_for
from support.store import outbox_states

pytestmark = pytest.mark.slow

Queue = Callable[..., None]
SEND_TIMEOUT = 60
DEADLINE = T0 + SEND_TIMEOUT + CLAIM_GRACE  # of a claim made at T0
WAIT = 60.0  # generous: two cores, other test runs beside us


def start_dispatch(sender: Any, now: int, *flags: str, wait: bool = False) -> subprocess.Popen[str]:
    """`agentbox dispatch` as a real process (the `home` fixture set up os.environ)."""
    env = {**os.environ, "AGENTBOX_NOW": str(now), **sender.env(wait=wait)}
    return subprocess.Popen(
        [sys.executable, "-m", "agentbox", "dispatch", "--timeout", f"{SEND_TIMEOUT}s",
         *flags, "--", *sender.argv],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_mid_send(sender: Any, now: int, mode: str) -> dict[str, Any]:
    """Start a dispatch whose sender hangs, then SIGKILL the dispatcher and its sender."""
    before = len(sender.calls())
    proc = start_dispatch(sender, now, "--mode", mode, wait=True)
    try:
        wait_for(lambda: len(sender.calls()) > before, "the sender's marker")
    finally:
        proc.kill()
        proc.communicate(timeout=WAIT)
    call: dict[str, Any] = sender.calls()[-1]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(call["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(call["pid"]), "the sender to die")
    return call


def test_killed_dispatcher_at_least_once_resends_once_under_the_same_key(
        cli_queue: Queue, inbox_store: Store, sender: Any,
        agentbox_proc: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    cli_queue(T0, "deploy finished", "3 tests flaky")
    first = kill_mid_send(sender, T0, "at-least-once")
    assert first["attempt"] == "1"
    assert outbox_states(inbox_store) == ["sending", "sending"]

    # Until the claim deadline nobody knows the dispatcher is gone: no resend.
    early = agentbox_proc("dispatch", "--", *sender.argv, env={"AGENTBOX_NOW": str(DEADLINE)})
    assert early.returncode == 0, early.stderr
    assert "nothing to send" in early.stderr and "in flight" in early.stderr
    assert len(sender.calls()) == 1

    late = agentbox_proc("dispatch", "--", *sender.argv,
                         env={"AGENTBOX_NOW": str(DEADLINE + 1)})
    assert late.returncode == 0, late.stderr
    assert "try 2 of 5 under the same key" in late.stderr
    calls = sender.calls()
    assert len(calls) == 2
    assert calls[1]["key"] == first["key"]
    assert calls[1]["attempt"] == "2"
    assert calls[1]["body"] == first["body"] == "deploy finished\n\n3 tests flaky"
    assert outbox_states(inbox_store) == ["sent", "sent"]

    again = agentbox_proc("dispatch", "--", *sender.argv,
                          env={"AGENTBOX_NOW": str(DEADLINE + 10_000)})
    assert again.returncode == 0, again.stderr
    assert len(sender.calls()) == 2  # resent once, not again


def test_killed_dispatcher_at_most_once_waits_for_the_operator(
        cli_queue: Queue, inbox_store: Store, sender: Any,
        agentbox_proc: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    def dispatch(now: int) -> subprocess.CompletedProcess[str]:
        done = agentbox_proc("dispatch", "--", *sender.argv, env={"AGENTBOX_NOW": str(now)})
        assert done.returncode == 0, done.stderr
        return done

    def resolve(key: str, verdict: str) -> None:
        done = agentbox_proc("outbox", "resolve", key, verdict)
        assert done.returncode == 0, done.stderr

    cli_queue(T0, "refund issued")
    first = kill_mid_send(sender, T0, "at-most-once")
    # The dispatchers that come later are at-least-once (the default): the mode
    # recorded on the claim decides.
    dispatch(DEADLINE + 1)
    assert outbox_states(inbox_store) == ["uncertain"]
    dispatch(T0 + 10 * 3600)
    assert len(sender.calls()) == 1 and outbox_states(inbox_store) == ["uncertain"]
    resolve(first["key"], "--sent")
    assert outbox_states(inbox_store) == ["sent"]

    later = T0 + 11 * 3600
    cli_queue(later, "second refund")
    second = kill_mid_send(sender, later, "at-most-once")
    assert second["key"] != first["key"]
    dispatch(later + SEND_TIMEOUT + CLAIM_GRACE + 1)
    assert outbox_states(inbox_store) == ["sent", "uncertain"]
    resolve(second["key"], "--unsent")
    assert outbox_states(inbox_store) == ["sent", "held"]
    dispatch(later + SEND_TIMEOUT + CLAIM_GRACE + 2)
    calls = sender.calls()
    assert [c["body"] for c in calls] == ["refund issued", "second refund", "second refund"]
    assert calls[2]["key"] not in (first["key"], second["key"])
    assert outbox_states(inbox_store) == ["sent", "sent"]
    assert agentbox_proc("outbox", "resolve", second["key"], "--sent").returncode == 3


def test_an_interrupted_dispatcher_leaves_its_send_not_known(
        cli_queue: Queue, inbox_store: Store, sender: Any) -> None:
    """Ctrl-C mid-send: the sender is stopped and the send is settled as not known."""
    cli_queue(T0, "refund issued")
    proc = start_dispatch(sender, T0, "--mode", "at-most-once", wait=True)
    try:
        wait_for(lambda: len(sender.calls()) == 1, "the sender's marker")
        proc.send_signal(signal.SIGINT)
        code, out, err = finish_proc(proc)
    finally:
        sender.release.touch()
    assert (code, out) == (130, "")
    assert "Traceback" not in err and err.count("\n") <= 1, err
    wait_for(lambda: not alive(sender.calls()[0]["pid"]), "the sender to be stopped")
    [row] = inbox_store.outbox(("held", "sending", "sent", "uncertain"))
    assert (row.state, row.error) == ("uncertain", "dispatcher interrupted mid-send")
    assert len(sender.calls()) == 1


def test_two_dispatchers_started_together_send_each_row_once(
        cli_queue: Queue, inbox_store: Store, sender: Any) -> None:
    cli_queue(T0, "a", "b", "c")
    procs = [start_dispatch(sender, T0, wait=True) for _ in range(2)]
    try:
        # One claims the rows and its sender hangs; the other finds them taken and
        # ends while that send is still in flight.
        wait_for(lambda: any(p.poll() is not None for p in procs), "one dispatcher to end")
        wait_for(lambda: len(sender.calls()) >= 1, "the sender's marker")
        assert len(sender.calls()) == 1
        loser = next(p for p in procs if p.poll() is not None)
        code, out, err = finish_proc(loser)
        assert (code, out) == (0, "")
        assert "nothing to send" in err and "1 dispatch(es) in flight" in err
    finally:
        sender.release.touch()
    results = [finish_proc(p) for p in procs if p is not loser]
    assert [r[0] for r in results] == [0]
    assert [c["body"] for c in sender.calls()] == ["a\n\nb\n\nc"]
    assert outbox_states(inbox_store) == ["sent", "sent", "sent"]


def test_ingest_while_a_slow_send_is_in_flight_is_not_blocked(
        cli_queue: Queue, inbox_store: Store, sender: Any,
        agentbox_proc: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    cli_queue(T0, "slow channel")
    proc = start_dispatch(sender, T0, wait=True)
    try:
        wait_for(lambda: len(sender.calls()) == 1, "the sender's marker")
        started = time.monotonic()
        ingested = agentbox_proc("ingest", "github", "delivery-1", "--payload", '{"n": 1}',
                                 env={"AGENTBOX_NOW": str(T0 + 1)})
        elapsed = time.monotonic() - started
        # Still mid-send: the sender only ends once the release file exists.
        assert proc.poll() is None
    finally:
        sender.release.touch()
    assert ingested.returncode == 0, ingested.stderr
    assert "stored" in ingested.stdout
    # The busy timeout is 30 s; a held write lock would have kept ingest waiting on it.
    assert elapsed < 10, elapsed
    code, _, err = finish_proc(proc)
    assert code == 0, err
    assert outbox_states(inbox_store) == ["sent"]
    assert inbox_store.find("github", "delivery-1") is not None
