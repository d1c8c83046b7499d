"""A sender can tell a whole body from a cut-short one: its size and digest are in
its environment (a dispatcher killed while writing it leaves the sender a short
stdin, which looks like a shorter message)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.ledger.store import Store
from support.clock import T0
from support.store import say

CHECKING = r"""
import hashlib, json, os, sys
body = sys.stdin.buffer.read()
with open(os.environ["SENDER_LOG"], "w") as fh:
    json.dump({"bytes": os.environ.get("AGENTBOX_BODY_BYTES"),
               "sha256": os.environ.get("AGENTBOX_BODY_SHA256"),
               "read_bytes": len(body), "read_sha256": hashlib.sha256(body).hexdigest()}, fh)
whole = (str(len(body)) == os.environ["AGENTBOX_BODY_BYTES"]
         and hashlib.sha256(body).hexdigest() == os.environ["AGENTBOX_BODY_SHA256"])
sys.exit(0 if whole else 3)
"""


def test_the_sender_gets_the_body_size_and_digest(cli: Callable[..., Any], tmp_path: Path,
                                                  inbox_store: Store,
                                                  monkeypatch: Any) -> None:
    body_parts = ["déjà vu: 日本語 ✓", "second message"]
    say(inbox_store, T0, *body_parts)
    script, log = tmp_path / "sender.py", tmp_path / "seen.json"
    script.write_text(CHECKING)
    monkeypatch.setenv("SENDER_LOG", str(log))
    result = cli("dispatch", "--", sys.executable, str(script), now=T0)
    assert result.code == 0, result.err
    expected = "\n\n".join(body_parts).encode("utf-8")
    seen = json.loads(log.read_text())
    assert seen == {"bytes": str(len(expected)), "sha256": hashlib.sha256(expected).hexdigest(),
                    "read_bytes": len(expected),
                    "read_sha256": hashlib.sha256(expected).hexdigest()}
