"""Helpers for tests that start real processes, shared by every folder.

The machine is shared and has two cores: tests poll for a condition with a
generous timeout instead of sleeping a fixed time.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def proc_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any AGENTBOX_* variable, then alice's home and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
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
