"""Ctrl-C during a send stops the sender's whole process group, grandchildren too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support.clock import T0

# A sender that leaves a grandchild behind: only stopping the sender's whole
# process group ends the grandchild.
SENDER = "sleep 300 & echo $! > {pidfile}; wait"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purpose
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def wait_for(check: object, timeout: float = 30) -> None:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_sigint_to_dispatch_stops_the_senders_grandchild(home: Path, tmp_path: Path,
                                                         cli_queue: Callable[..., None]) -> None:
    cli_queue(T0, "hello")
    pidfile = tmp_path / "grandchild.pid"
    env = {**os.environ, "AGENTBOX_NOW": str(T0)}
    proc = subprocess.Popen([sys.executable, "-m", "agentbox", "dispatch", "--", "sh", "-c",
                             SENDER.format(pidfile=pidfile)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())
        grandchild = int(pidfile.read_text())
        assert alive(grandchild)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        wait_for(lambda: not alive(grandchild), timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
