"""Helpers for tests that start real processes, shared by every folder.

The machine is shared and has two cores: tests poll for a condition with a
generous timeout instead of sleeping a fixed time.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest


def proc_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any AGENTBOX_* variable but the database the test runs
    on (AGENTBOX_DB, on PostgreSQL), then alice's home and ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AGENTBOX_") or k == "AGENTBOX_DB"}
    env.update(AGENTBOX_HOME=str(home), AGENTBOX_USER="alice", **extra)
    return env


def wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Poll until ``condition()`` is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """A process exists and is not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def finish_proc(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """Wait for a started process: (exit code, stdout, stderr)."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


# A command tree three deep: this sh (the child), a `sleep` and an inner sh (grandchildren),
# and the inner sh's `sleep` (a great-grandchild). It writes every pid to PIDFILE, one a
# line, once all of them exist. With "stubborn" as its second argument, all but the child
# ignore SIGTERM: the child exits at once, its descendants end only by SIGKILL.
TREE = r"""
out=$1
[ "$2" = stubborn ] && trap '' TERM
sleep 300 &
grandchild=$!
sh -c 'sleep 300 & echo $! > "$1.inner"; wait' inner "$out" &
inner=$!
while [ ! -s "$out.inner" ]; do sleep 0.01; done
trap - TERM
printf '%s\n' $$ $grandchild $inner $(cat "$out.inner") > "$out.tmp"
mv "$out.tmp" "$out"
wait
"""


def tree_argv(tmp: Path, stubborn: bool = False) -> tuple[list[str], Path]:
    """argv of the TREE command and the file where its pids will be."""
    script, pidfile = tmp / "tree.sh", tmp / "tree.pids"
    script.write_text(TREE)
    return ["/bin/sh", str(script), str(pidfile), "stubborn" if stubborn else "plain"], pidfile


def tree_pids(pidfile: Path, running: bool = True) -> list[int]:
    """The four pids of a started TREE, once it has written them (all alive if ``running``)."""
    wait_for(pidfile.exists, "the command tree to start")
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 4 and (not running or all(alive(p) for p in pids)), pids
    return pids


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def gone_within(pids: list[int], seconds: float) -> float:
    """Seconds until every one of ``pids`` is gone; fails if that takes over ``seconds``."""
    began = time.monotonic()
    while any(alive(p) for p in pids):
        if time.monotonic() - began > seconds:
            left = [p for p in pids if alive(p)]
            pytest.fail(f"still alive after {seconds}s: {left}")
        time.sleep(0.005)
    return time.monotonic() - began


def kill_all(pids: list[int]) -> None:
    """Clean-up after a test that may have failed: SIGKILL whatever is left."""
    import contextlib
    import signal

    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def read_line(stream: IO[str], what: str, timeout: float = 60) -> str:
    """The next line of a child's text stream, failing after ``timeout`` seconds."""
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(stream.readline()), daemon=True).start()
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"timed out waiting for {what}")
