"""Outbox fixtures: messages put in through a finished run, and a recording sender."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agentbox import paths
from agentbox.backends.sqlite.store import SqliteStore
from contract.kit import say

Queue = Callable[..., None]

# Records what it was given (body, dispatch key, environment) as one JSON line
# before anything else, then waits for a release file if told to, then exits
# with the code it was told to.
SENDER = r"""
import json, os, sys, time
body = sys.stdin.read()
env = os.environ
entry = {"pid": os.getpid(), "at": time.time(), "body": body,
         "key": env.get("AGENTBOX_DISPATCH_KEY"), "attempt": env.get("AGENTBOX_DISPATCH_ATTEMPT"),
         "urgent": env.get("AGENTBOX_DISPATCH_URGENT"), "user": env.get("AGENTBOX_USER"),
         "db": env.get("AGENTBOX_DB")}
with open(env["SENDER_LOG"], "a") as fh:
    fh.write(json.dumps(entry) + "\n")
release = env.get("SENDER_WAIT_FOR")
if release:
    give_up = time.monotonic() + 120
    while not os.path.exists(release) and time.monotonic() < give_up:
        time.sleep(0.05)
code = int(env.get("SENDER_EXIT", "0"))
if code:
    print("the channel said no", file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def queue(store: SqliteStore) -> Queue:
    """queue(now, "body", ..., urgent=False) into the engine-level ``store``."""
    return partial(say, store)


@pytest.fixture
def inbox(home: Path) -> Iterator[SqliteStore]:
    """The store the CLI uses for user alice."""
    path = paths.inbox_path("alice")
    paths.private_dir(path.parent)
    with SqliteStore(path) as opened:
        yield opened


@pytest.fixture
def cli_queue(inbox: SqliteStore) -> Queue:
    """queue(now, "body", ..., urgent=False) into alice's inbox."""

    return partial(say, inbox)


@dataclass
class Sender:
    argv: list[str]
    log: Path
    release: Path

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def env(self, wait: bool = False, exit_code: int = 0) -> dict[str, str]:
        """Environment for a sender started by a real agentbox process."""
        env = {"SENDER_LOG": str(self.log), "SENDER_EXIT": str(exit_code)}
        if wait:
            env["SENDER_WAIT_FOR"] = str(self.release)
        return env


@pytest.fixture
def sender(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sender:
    """A recording sender; in-process CLI runs see its log in the environment."""
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    found = Sender([sys.executable, str(script)], tmp_path / "sent.jsonl",
                   tmp_path / "release")
    monkeypatch.setenv("SENDER_LOG", str(found.log))
    monkeypatch.delenv("SENDER_WAIT_FOR", raising=False)
    monkeypatch.setenv("SENDER_EXIT", "0")
    return found
