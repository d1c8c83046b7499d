"""The sender's whole process tree ends with the dispatch, however it ends; its stderr
reaches ours line by line while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.processes import (
    children,
    finish_proc,
    gone_within,
    kill_all,
    read_line,
    tree_argv,
    tree_pids,
)

pytestmark = pytest.mark.slow
GONE_WITHIN = 1.0  # seconds after agentbox dies


def start_dispatch(*argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "AGENTBOX_NOW": str(T0)}
    return subprocess.Popen([sys.executable, "-m", "agentbox", "dispatch", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_of_dispatch_takes_the_senders_tree_with_it(
        home: Path, tmp_path: Path, cli_queue: Callable[..., None]) -> None:
    cli_queue(T0, "hello")
    argv, pidfile = tree_argv(tmp_path)
    proc = start_dispatch("--", *argv)
    pids = tree_pids(pidfile)
    watchdog = [p for p in children(proc.pid) if p not in pids]
    try:
        assert len(watchdog) == 1
        proc.send_signal(signal.SIGKILL)
        took = gone_within(pids + watchdog, GONE_WITHIN)
    finally:
        kill_all(pids)
        finish_proc(proc)
    print(f"sender tree of {len(pids)} gone {took * 1000:.0f} ms after SIGKILL of dispatch")


def test_a_sender_timeout_stops_the_whole_tree(
        cli: Callable[..., Any], tmp_path: Path, cli_queue: Callable[..., None]) -> None:
    cli_queue(T0, "hello")
    argv, pidfile = tree_argv(tmp_path, stubborn=True)
    result = cli("dispatch", "--timeout", "1s", "--", *argv, now=T0)
    pids = tree_pids(pidfile, running=False)
    try:
        gone_within(pids, GONE_WITHIN)
    finally:
        kill_all(pids)
    assert result.code == 1
    assert "sender timed out after 1s" in result.err


def test_the_senders_stderr_is_relayed_while_it_runs(
        home: Path, tmp_path: Path, cli_queue: Callable[..., None]) -> None:
    cli_queue(T0, "hello")
    go = tmp_path / "go"
    sender = ("import os, sys, time\n"
              "sys.stdin.read()\n"
              "print('connecting', file=sys.stderr, flush=True)\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
              "print('delivered', file=sys.stderr)\n")
    proc = start_dispatch("--", sys.executable, "-c", sender)
    try:
        assert proc.stderr is not None
        assert read_line(proc.stderr, "the sender's first line") == "sender: connecting\n"
        assert proc.poll() is None  # seen while the sender still runs
        go.touch()
        code, _out, err = finish_proc(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err
    assert err.splitlines()[0] == "sender: delivered"
