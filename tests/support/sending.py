"""The recording sender: a dispatch command that writes down what it was given.

It records its call (body, dispatch key, attempt, environment) as one JSON
line before anything else, then waits for a release file if told to, then
exits with the code it was told to.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SENDER = r"""
import json, os, sys, time
body = sys.stdin.read()
env = os.environ
entry = {"pid": os.getpid(), "at": time.time(), "body": body,
         "key": env.get("AGENTBOX_DISPATCH_KEY"), "attempt": env.get("AGENTBOX_DISPATCH_ATTEMPT"),
         "urgent": env.get("AGENTBOX_DISPATCH_URGENT"), "user": env.get("AGENTBOX_USER"),
         "db": env.get("AGENTBOX_DB"), "channel": env.get("AGENTBOX_CHANNEL")}
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


@dataclass
class Sender:
    """A recording sender in ``folder``: its argv, its log, and the file that releases it."""

    argv: list[str]
    log: Path
    release: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Sender:
        script = folder / "sender.py"
        script.write_text(SENDER)
        return cls([sys.executable, str(script)], folder / "sent.jsonl", folder / "release")

    def calls(self) -> list[dict[str, Any]]:
        """Every call so far, oldest first."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def env(self, wait: bool = False, exit_code: int = 0) -> dict[str, str]:
        """Environment for a sender started by a real agentbox process."""
        env = {"SENDER_LOG": str(self.log), "SENDER_EXIT": str(exit_code)}
        if wait:
            env["SENDER_WAIT_FOR"] = str(self.release)
        return env
