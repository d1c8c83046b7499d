"""Approval links through the CLI: `approve list` shows them once public_url is set,
`approve rotate-links` replaces them, a run's message links only a live approval, and
`dispatch` sends the link in place of `{approval:ID}`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support.clock import T0

URL = "https://agent.example/box"


def links(cli, now: int = T0) -> dict[str, str | None]:
    result = cli("approve", "list", "--json", now=now)
    assert result.code == 0, result.err
    return {a["id"]: a["url"] for a in json.loads(result.out)}


def test_list_shows_a_link_for_each_pending_request_once_public_url_is_set(cli) -> None:
    assert cli("approve", "request", "a1", "--expires-in", "1h", "--action", "one",
               now=T0).code == 0
    assert cli("approve", "request", "a2", "--expires-in", "1h", "--action", "two",
               now=T0).code == 0
    assert links(cli) == {"a1": None, "a2": None}
    assert cli("config", "set", "public_url", URL).code == 0
    assert cli("approve", "answer", "a2", "no", now=T0 + 1).code == 0
    shown = links(cli, T0 + 2)
    assert shown["a2"] is None and shown["a1"] is not None
    assert shown["a1"].startswith(f"{URL}/a/")
    assert links(cli, T0 + 2) == shown  # the same link every time
    table = cli("approve", "list", now=T0 + 2)
    assert "url" in table.out
    rotated = cli("approve", "rotate-links", now=T0 + 3)
    assert rotated.code == 0 and "rotated" in rotated.out
    assert links(cli, T0 + 3)["a1"] not in (None, shown["a1"])


def test_public_url_must_be_an_http_url(cli) -> None:
    for bad in ("agent.example", "ftp://agent.example", "https://agent.example/?q=1",
                "https://agent.example/#top"):
        result = cli("config", "set", "public_url", bad)
        assert result.code != 0 and "public_url" in result.err, bad


def test_a_run_whose_message_links_no_live_approval_fails(cli, tmp_path: Path,
                                                          open_inbox) -> None:
    answer = {"messages": ["Refund? {approval:nope}"]}
    handler = tmp_path / "answer.py"
    handler.write_text(f"import sys\nsys.stdin.read()\nprint({json.dumps(json.dumps(answer))})\n")
    assert cli("ingest", "chat", "m1", "--payload", "{}", now=T0).code == 0
    result = cli("run", "--", sys.executable, str(handler), now=T0)
    assert result.code == 1
    assert "neither requested in this answer nor pending: nope" in result.err + result.out
    store = open_inbox()
    assert store.outbox() == [] and store.find("chat", "m1").status == "pending"


def test_dispatch_sends_the_link(cli, tmp_path: Path) -> None:
    answer = {"messages": ["Refund? {approval:r1}"],
              "approvals": [{"id": "r1", "expires_in": "4h", "action": "refund"}]}
    handler = tmp_path / "answer.py"
    handler.write_text(f"import sys\nsys.stdin.read()\nprint({json.dumps(json.dumps(answer))})\n")
    assert cli("config", "set", "public_url", URL).code == 0
    assert cli("ingest", "chat", "m1", "--payload", "{}", now=T0).code == 0
    assert cli("run", "--", sys.executable, str(handler), now=T0).code == 0
    sent = cli("dispatch", now=T0 + 1)
    assert sent.code == 0, sent.err
    assert sent.out.strip() == f"Refund? {links(cli, T0 + 1)['r1']}"


def test_config_show_never_prints_the_console_token(cli) -> None:
    assert cli("config", "set", "console_token", "s3cret-s3cret-s3cret").code == 0
    shown = cli("config", "show", "--json")
    assert "s3cret" not in shown.out
    assert {r["key"]: r["value"] for r in json.loads(shown.out)}["console_token"] == "(set)"
    assert cli("config", "set", "console_token", "short").code == 2
