"""Human tables fit 80 columns, keep keys and ids whole, and wrap the free text.

An 80-column terminal, or a pipe (where rich assumes 80 columns), must show
every delivery id, dispatch key and approval id on one line, so that it can
be copied into `dead show`, `replay` or `outbox resolve`; errors, bodies,
actions and payloads are what gives way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from support.clock import T0_2023
from support.fixtures import Cli
from support.processes import proc_env

GITHUB_ID = "72f1c8a0-5d0e-11ee-8c99-0242ac120002"
STRIPE_ID = "evt_1NirD82eZvKYlo2CIvbtLWuY"
ERROR = ("Traceback (most recent call last):\n  File \"agent.py\", line 12, in <module>\n"
         "    raise RuntimeError('the model API answered 529 overloaded; retry later')\n"
         "RuntimeError: the model API answered 529 overloaded; retry later")
BODY = ("Good morning! Three pull requests are waiting for your review, and the invoice "
        "for October has been paid in full. Nothing else needs you today.")
APPROVAL = "deploy-2023-11-14-production-canary"
ACTION = "deploy release 2.3.1 to production after the canary has been green for an hour"
TIMER = "reminder-for-the-quarterly-billing-reconciliation"


def script(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return [sys.executable, str(path)]


@pytest.fixture
def busy_inbox(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Dead events with long ids and errors, held and failed messages, approvals, timers."""
    monkeypatch.setenv("AGENTBOX_NOW", str(T0_2023))
    assert cli("ingest", "github", GITHUB_ID).code == 0
    assert cli("ingest", "stripe", STRIPE_ID).code == 0
    assert cli("config", "set", "max_attempts", "1").code == 0
    failing = script(tmp_path, "fail.py",
                     f"import sys\nsys.stdin.read()\nsys.stderr.write({ERROR!r})\nsys.exit(1)\n")
    assert cli("run", "--", *failing).code == 1
    assert cli("ingest", "chat", "msg-1").code == 0
    answer = {"messages": [BODY, {"body": "urgent: the deploy failed", "urgent": True}],
              "approvals": [{"id": APPROVAL, "expires_in": "4h", "action": ACTION}]}
    handler = script(tmp_path, "ok.py", "import sys\nsys.stdin.read()\n"
                     f"sys.stdout.write({json.dumps(answer)!r})\n")
    assert cli("run", "--", *handler).code == 0
    # A sender that hangs: at most once, its dispatch is left uncertain under its key.
    sender = script(tmp_path, "send.py", "import sys, time\nsys.stdin.read()\n"
                    "sys.stderr.write('channel refused: 429 too many requests, slow down')\n"
                    "sys.stderr.flush()\ntime.sleep(60)\n")
    assert cli("dispatch", "--mode", "at-most-once", "--timeout", "1s", "--", *sender).code == 1
    assert cli("schedule", "add", TIMER, "--at", "+3h").code == 0
    assert cli("schedule", "add", "nightly", "--every", "1d", "--payload",
               json.dumps({"report": "nightly", "to": ["ops@example.com", "lead@example.com"]})
               ).code == 0
    return tmp_path


def dispatch_key(cli: Cli) -> str:
    rows = json.loads(cli("outbox", "--json").out)
    keys = {r["dispatch_key"] for r in rows if r["dispatch_key"]}
    assert len(keys) == 1
    return keys.pop()


COMMANDS = [["dead"], ["dead", "show", "1"], ["outbox"], ["approve", "list"],
            ["schedule", "list"], ["status"], ["config", "show"]]


def whole(out: str, key: str) -> bool:
    return any(key in line for line in out.splitlines())


def assert_fits(out: str, width: int = 80) -> None:
    for line in out.splitlines():
        assert cell_len(line) <= width, line


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_tables_fit_80_columns_with_keys_whole(cli: Cli, busy_inbox: Path, argv: list[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = cli(*argv)
    assert result.code == 0, result.err
    assert_fits(result.out)
    keys = {"dead": [GITHUB_ID, STRIPE_ID], "outbox": [dispatch_key(cli)],
            "approve": [APPROVAL], "schedule": [TIMER, f"approval/{APPROVAL}"],
            "config": ["handler_timeout"]}.get(argv[0], [])
    if argv[:2] == ["dead", "show"]:
        keys = [f"github/{GITHUB_ID}"]
    for key in keys:
        assert whole(result.out, key), (key, result.out)
    if argv[0] in ("dead", "outbox", "approve", "schedule"):
        assert whole(result.out, "2023-11-14T22:13:20Z")  # times are kept whole too


def test_free_text_wraps_instead_of_disappearing(cli: Cli, busy_inbox: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    dead = " ".join(cli("dead").out.split())
    assert "the model API answered 529 overloaded; retry later" in dead
    approvals = " ".join(cli("approve", "list").out.split())
    assert ACTION in approvals


def test_outbox_shows_a_preview_of_each_body(cli: Cli, busy_inbox: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = cli("outbox").out
    flat = " ".join(out.split())
    assert "Good morning! Three pull requests" in flat
    assert "urgent: the deploy failed" in flat
    assert "Nothing else needs you today." not in flat  # a preview, not the whole body
    assert "channel refused: 429" in flat
    assert_fits(out)
    wide = json.loads(cli("outbox", "--json").out)
    assert wide[0]["body"] == BODY  # JSON keeps the whole body


def test_piped_output_fits_80_columns(busy_inbox: Path, home: Path) -> None:
    """A pipe has no width; without COLUMNS rich assumes 80, and the tables fit it."""
    env = {k: v for k, v in proc_env(home).items() if k not in ("COLUMNS", "LINES")}
    env["AGENTBOX_NOW"] = str(T0_2023)
    for argv in (["dead"], ["outbox"], ["approve", "list"], ["schedule", "list"]):
        done = subprocess.run([sys.executable, "-m", "agentbox", *argv], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert_fits(done.stdout)
    done = subprocess.run([sys.executable, "-m", "agentbox", "dead"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert whole(done.stdout, GITHUB_ID)


def test_a_wide_terminal_keeps_one_row_per_record(cli: Cli, busy_inbox: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    out = cli("schedule", "list").out
    row = next(line for line in out.splitlines() if "nightly" in line)
    assert "ops@example.com" in row  # the payload is on the row, not under it
