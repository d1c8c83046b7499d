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


def _pipe_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/fd/1").st_ino


@pytest.mark.parametrize("by", ["group", "pipe"])
def test_the_watchdog_kills_only_what_is_still_registered(by):
    """Unit level: a group (or a child's pipe) crossed off is never signalled; one left
    on is killed. By pipe: agentbox died between starting a child and noting its group,
    and the watchdog finds the group by the child's stdout pipe."""
    import subprocess

    from agentbox.process import _Watchdog

    def sleeper() -> subprocess.Popen[bytes]:
        """A child holding the only end left of a pipe (no reader: this test must not
        hold it, or the watchdog would kill the test's own group)."""
        read, write = os.pipe()
        try:
            return subprocess.Popen(["sleep", "300"], stdout=write, start_new_session=True)
        finally:
            os.close(read)
            os.close(write)

    watchdog = _Watchdog()
    kept, dropped = sleeper(), sleeper()
    try:
        fd = watchdog.fd()
        if by == "group":
            os.write(fd, b"+%d\n+%d\n" % (kept.pid, dropped.pid))
            watchdog.forget(dropped.pid)
        else:
            os.write(fd, b"?%d\n?%d\n" % (_pipe_of(kept.pid), _pipe_of(dropped.pid)))
            os.write(fd, b"!%d\n" % _pipe_of(dropped.pid))
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


def test_a_handler_leads_its_own_session_and_group_and_is_started_without_a_fork():
    """The child runs no Python between fork and exec: CPython then starts it with vfork,
    which runs no at-fork hook, where a fork (a preexec_fn) runs them all."""
    from agentbox.process import run_child

    forks: list[int] = []
    watching = [True]
    os.register_at_fork(before=lambda: forks.append(1) if watching[0] else None)
    try:
        result = run_child([sys.executable, "-c", "import os; print(os.getpid(), "
                            "os.getpgid(0), os.getsid(0), os.getppid())"],
                           b"", dict(os.environ), timeout=30)
    finally:
        watching[0] = False
    assert result.ok, result.describe()
    pid, group, session, parent = map(int, result.stdout.split())
    assert group == session == pid  # its own session, leader of its own group
    assert parent == os.getpid()
    assert forks == []
