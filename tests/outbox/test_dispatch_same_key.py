"""A key that may have delivered keeps its messages, however its later tries end.

Real processes: a sender that hangs once (killed at its timeout: the outcome is
not known), then fails (exit 1), then succeeds. Every try must carry the same
dispatch key, or a channel that dedupes on the key delivers the message twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.outbox import CLAIM_GRACE, RESEND_BACKOFF
from support.clock import T0
from support.store import outbox_states, say

pytestmark = pytest.mark.slow

TIMEOUT = 1  # seconds: the hanging try is stopped quickly

# Each call takes the next word from the script file: hang, fail or ok.
SCRIPTED = r"""
import json, os, sys, time
body = sys.stdin.read()
script = os.environ["SENDER_SCRIPT"]
with open(script) as fh:
    words = fh.read().split()
with open(script, "w") as fh:
    fh.write(" ".join(words[1:]))
with open(os.environ["SENDER_LOG"], "a") as fh:
    fh.write(json.dumps({"key": os.environ["AGENTBOX_DISPATCH_KEY"], "word": words[0],
                         "attempt": os.environ["AGENTBOX_DISPATCH_ATTEMPT"],
                         "body": body}) + "\n")
if words[0] == "hang":
    time.sleep(120)
sys.exit(0 if words[0] == "ok" else 1)
"""


def test_a_resend_that_fails_keeps_the_key_until_a_try_succeeds(
        tmp_path: Path, inbox_store: Store,
        agentbox_proc: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    script, log = tmp_path / "words", tmp_path / "sent.jsonl"
    script.write_text("hang fail ok")
    sender = tmp_path / "sender.py"
    sender.write_text(SCRIPTED)
    env = {"SENDER_SCRIPT": str(script), "SENDER_LOG": str(log)}
    say(inbox_store, T0, "deploy finished")

    def dispatch(now: int) -> subprocess.CompletedProcess[str]:
        return agentbox_proc("dispatch", "--timeout", f"{TIMEOUT}s", "--", sys.executable,
                             str(sender), env={**env, "AGENTBOX_NOW": str(now)}, timeout=120)

    hung = dispatch(T0)
    assert hung.returncode == 1 and "outcome not known" in hung.stderr
    resend_at = T0 + TIMEOUT + CLAIM_GRACE + 1
    failed = dispatch(resend_at)
    assert failed.returncode == 1
    assert "kept under the same key" in failed.stderr, failed.stderr
    assert outbox_states(inbox_store) == ["sending"]
    too_soon = dispatch(resend_at + RESEND_BACKOFF)
    assert too_soon.returncode == 0 and "nothing to send" in too_soon.stderr
    sent = dispatch(resend_at + RESEND_BACKOFF + 1)
    assert sent.returncode == 0, sent.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(c["word"], c["attempt"]) for c in calls] == [("hang", "1"), ("fail", "2"),
                                                          ("ok", "3")]
    assert len({c["key"] for c in calls}) == 1
    assert outbox_states(inbox_store) == ["sent"]
