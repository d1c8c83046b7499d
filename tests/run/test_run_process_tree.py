"""No orphans: the handler's whole process tree ends with the run, however the run ends.

Real `agentbox run` processes with a real three-deep command tree (sh, its
children, their children). The tree must be gone within a second of agentbox
dying, by SIGKILL included, and once a timeout or a lost lease stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from support.clock import T0
from support.processes import (
    alive,
    children,
    finish_proc,
    gone_within,
    kill_all,
    tree_argv,
    tree_pids,
)
from support.store import event_state, steal_lease

pytestmark = pytest.mark.slow
GONE_WITHIN = 1.0  # seconds after agentbox dies


def test_sigkill_of_agentbox_takes_the_whole_tree_with_it(cli, start_run, tmp_path, open_inbox):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    argv, pidfile = tree_argv(tmp_path)
    worker = start_run("--", *argv, now=T0)
    pids = tree_pids(pidfile)
    watchdog = [p for p in children(worker.pid) if p not in pids]
    assert len(watchdog) == 1  # the handler's sh and the watchdog are its only children
    try:
        worker.send_signal(signal.SIGKILL)
        took = gone_within(pids + watchdog, GONE_WITHIN)
    finally:
        kill_all(pids)
    print(f"tree of {len(pids)} gone {took * 1000:.0f} ms after SIGKILL of agentbox run")
    assert finish_proc(worker)[0] == -signal.SIGKILL
    assert event_state(open_inbox(), "m1") == ("running", 1)  # for the next worker, after the lease


@pytest.mark.parametrize("stubborn", [False, True], ids=["plain", "ignores-SIGTERM"])
def test_a_timeout_stops_the_whole_tree(cli, tmp_path, open_inbox, stubborn):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    argv, pidfile = tree_argv(tmp_path, stubborn)
    began = time.monotonic()
    result = cli("run", "--timeout", "3", "--", *argv, now=T0)
    pids = tree_pids(pidfile, running=False)
    try:
        took = gone_within(pids, GONE_WITHIN)  # already gone when the run returns
    finally:
        kill_all(pids)
    print(f"timeout ({'stubborn' if stubborn else 'plain'}): run took "
          f"{time.monotonic() - began:.1f}s, tree gone {took * 1000:.0f} ms after")
    assert result.code == 1
    assert "handler timed out after 3s" in result.err
    assert event_state(open_inbox(), "m1") == ("pending", 1)


def test_a_lost_lease_stops_the_whole_tree(cli, start_run, tmp_path, open_inbox):
    assert cli("config", "set", "lease_ttl", "3").code == 0
    assert cli("ingest", "chat", "m1").code == 0
    argv, pidfile = tree_argv(tmp_path)
    worker = start_run("--", *argv)
    pids = tree_pids(pidfile)
    try:
        store = open_inbox()
        steal_lease(store)
        code, _out, err = finish_proc(worker)
        took = gone_within(pids, GONE_WITHIN)
    finally:
        kill_all(pids)
    print(f"lost lease: tree gone {took * 1000:.0f} ms after the run exited")
    assert code == 75, err
    assert "lease lost while the handler ran" in err


def test_the_watchdog_leaves_with_a_run_that_ends_normally(cli, start_run, tmp_path):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    go = tmp_path / "go"
    handler = ("import os, sys, time\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
               "print('{}')\n")
    worker = start_run("--", sys.executable, "-c", handler, now=T0)
    try:
        deadline = time.monotonic() + 60
        while len(kids := children(worker.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(kids) == 2, kids  # the handler and the watchdog
        go.touch()
        code, _out, err = finish_proc(worker)
        assert code == 0, err
        gone_within(kids, GONE_WITHIN)
    finally:
        kill_all(kids)


def test_the_watchdog_kills_only_groups_still_registered(tmp_path):
    """Unit level: a group crossed off is never signalled; one left on is killed."""
    import subprocess

    from agentbox.process import _Watchdog

    watchdog = _Watchdog()
    kept = subprocess.Popen(["sleep", "300"], start_new_session=True)
    dropped = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        fd = watchdog.fd()
        os.write(fd, b"+%d\n+%d\n" % (kept.pid, dropped.pid))
        watchdog.forget(dropped.pid)
        os.close(fd)  # as if agentbox had died: end-of-file for the watchdog
        watchdog._fd = -1
        assert kept.wait(timeout=10) == -signal.SIGKILL
        time.sleep(0.2)
        assert dropped.poll() is None and alive(dropped.pid)
    finally:
        for proc in (kept, dropped):
            proc.kill()
            proc.wait()
        watchdog.close()
