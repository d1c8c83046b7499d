"""Crashes, stalls, signals and a live lease: real `agentbox run` processes.

Each test drives real processes with real signals. The clock is pinned with
AGENTBOX_NOW where expiry is the point, so no test waits out a lease; the
renewal test uses the real clock on purpose, with a lease of a few seconds.
"""

from __future__ import annotations

import signal
import time

import pytest

from support.clock import T0, TTL
from support.handler import records, started_pids
from support.processes import alive, finish_proc, wait_for
from support.store import actions, event_state, steal_lease

pytestmark = pytest.mark.slow


def messages(store) -> list[str]:
    return [m.body for m in store.outbox(("held", "sending", "sent"))]


def test_sigkill_mid_run_is_retried_once_the_lease_expires(
        cli, agentbox_proc, start_run, handler, tmp_path, open_inbox):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    started, log = tmp_path / "started", tmp_path / "log.jsonl"
    worker = start_run("--", *handler, "--record", str(log), "--started", str(started),
                       "--grandchild", "--sleep", "300", now=T0)
    handler_pids = started_pids(started)
    worker.send_signal(signal.SIGKILL)
    assert finish_proc(worker)[0] == -signal.SIGKILL
    # The handler and its grandchild die with agentbox: no orphan acts on stale work.
    wait_for(lambda: not any(alive(p) for p in handler_pids), "the handler group to die")

    store = open_inbox()
    assert event_state(store, "m1") == ("running", 1)
    live = agentbox_proc("run", "--", *handler, env={"AGENTBOX_NOW": str(T0 + TTL // 2)})
    assert live.returncode == 75, live.stderr
    assert len(records(log)) == 1  # the second worker never reached a handler

    after = agentbox_proc("run", "--", *handler, "--record", str(log),
                          env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
    assert after.returncode == 0, after.stderr
    first, retry = records(log)
    assert [e["attempt"] for e in retry["batch"]["events"]] == [2]
    assert retry["batch"]["generation"] > first["batch"]["generation"]
    assert event_state(store, "m1") == ("done", 2)
    assert messages(store) == ["handled m1"]
    assert actions(store, 1) == ["stored", "claimed", "abandoned", "claimed", "finished"]


def test_a_stalled_worker_is_fenced_out_after_a_takeover(
        cli, agentbox_proc, start_run, handler, tmp_path, open_inbox):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    started, go = tmp_path / "started", tmp_path / "go"
    stalled = start_run("--", *handler, "--started", str(started), "--wait-for", str(go),
                        now=T0)
    started_pids(started)
    stalled.send_signal(signal.SIGSTOP)
    try:
        busy = agentbox_proc("run", "--", *handler, env={"AGENTBOX_NOW": str(T0 + 10)})
        assert busy.returncode == 75
        assert "held by another worker" in busy.stderr
        takeover = agentbox_proc("run", "--", *handler,
                                 env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
        assert takeover.returncode == 0, takeover.stderr
        assert "generation 2: 1 event(s) (1) done" in takeover.stdout
    finally:
        stalled.send_signal(signal.SIGCONT)
    go.touch()
    code, out, err = finish_proc(stalled)
    assert code == 75
    assert "finish refused: this worker no longer holds the lease (generation 1)" in err
    assert "generation 1: finish refused by the lease fence" in out
    store = open_inbox()
    assert event_state(store, "m1") == ("done", 2)
    assert messages(store) == ["handled m1"]
    assert actions(store, 1).count("finished") == 1


def test_a_renewed_lease_is_never_taken_over(
        cli, agentbox_proc, start_run, handler, tmp_path, open_inbox):
    ttl = 3
    assert cli("config", "set", "lease_ttl", str(ttl)).code == 0
    assert cli("ingest", "chat", "m1").code == 0  # the real clock from here on
    started, log = tmp_path / "started", tmp_path / "log.jsonl"
    began = time.monotonic()
    worker = start_run("--", *handler, "--record", str(log), "--started", str(started),
                       "--sleep", str(3 * ttl + 1))
    started_pids(started)
    store = open_inbox()
    untils = set()
    rivals = 0
    while worker.poll() is None and time.monotonic() - began < 3 * ttl:
        rival = agentbox_proc("run", "--", *handler, "--record", str(log))
        if worker.poll() is None:  # the run was still working when the rival finished
            assert rival.returncode == 75, rival.stderr
            rivals += 1
        lease = store.lease()
        assert lease is not None and lease.generation == 1
        untils.add(lease.until)
        time.sleep(0.5)
    code, out, err = finish_proc(worker)
    assert code == 0, err
    assert out.startswith("generation 1: 1 event(s) (1) done")
    assert time.monotonic() - began > 3 * ttl  # it outlived the TTL several times over
    assert rivals >= 2 and len(untils) >= 2  # rivals came, and the lease kept moving
    assert len(records(log)) == 1
    assert event_state(store, "m1") == ("done", 1)
    assert messages(store) == ["handled m1"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_handler_group_and_gives_the_attempt_back(
        cli, agentbox_proc, start_run, handler, tmp_path, open_inbox, sig):
    assert cli("config", "set", "max_attempts", "1").code == 0  # the last attempt, even
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    started = tmp_path / "started"
    worker = start_run("--", *handler, "--started", str(started), "--grandchild",
                       "--sleep", "300", now=T0)
    pids = started_pids(started)
    worker.send_signal(sig)
    code, out, err = finish_proc(worker)
    assert code == 128 + sig  # a one-shot run that was cut short says so
    assert f"run interrupted by {sig.name}; the handler was stopped" in err
    assert out.startswith(f"generation 1: run interrupted by {sig.name}; the handler was "
                          "stopped; 1 event(s) (1) back to pending, the attempt given back")
    wait_for(lambda: not any(alive(p) for p in pids), "the handler group to stop")
    store = open_inbox()
    event = store.find("chat", "m1")
    # An asked-for stop never moves an event towards dead, even on its last attempt.
    assert (event.status, event.attempts, event.error) == ("pending", 0, None)
    assert actions(store, 1) == ["stored", "claimed", "interrupted"]
    assert store.story(1)[-1].detail == "run stopped; attempt 1 given back"
    assert messages(store) == []
    # Released: the next run at the very same moment need not wait out the TTL.
    again = agentbox_proc("run", "--", *handler, env={"AGENTBOX_NOW": str(T0)})
    assert again.returncode == 0, again.stderr
    assert event_state(store, "m1") == ("done", 1)


def test_a_lost_lease_stops_the_handler_and_records_nothing(
        cli, start_run, handler, tmp_path, open_inbox):
    assert cli("config", "set", "lease_ttl", "3").code == 0
    assert cli("ingest", "chat", "m1").code == 0
    started = tmp_path / "started"
    worker = start_run("--", *handler, "--started", str(started), "--grandchild",
                       "--sleep", "300")
    pids = started_pids(started)
    store = open_inbox()
    lease = store.lease()
    # Someone steals the lease (as after a clock jump); the next renewal must notice.
    steal_lease(store)
    code, out, err = finish_proc(worker)
    assert code == 75
    assert f"lease lost while the handler ran (generation {lease.generation})" in err
    assert "lease lost while the handler ran; 1 event(s) (1) left for the next worker" in out
    wait_for(lambda: not any(alive(p) for p in pids), "the handler group to stop")
    assert event_state(store, "m1") == ("running", 1)
    assert messages(store) == []
