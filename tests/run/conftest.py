"""Fixtures for runs: background `agentbox run` processes (the handler program is
support/handler.py's, its fixture and ``open_inbox`` every folder's)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest


@pytest.fixture
def start_run(start: Callable[..., subprocess.Popen[str]]) -> Callable[..., subprocess.Popen[str]]:
    """Start `agentbox run ARGS` in the background; every one is reaped at the end."""

    def start_one(*args: str, now: int | None = None) -> subprocess.Popen[str]:
        return start("run", *args, now=now)

    return start_one
