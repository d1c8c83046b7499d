"""Words from outside never drive the terminal: control characters show as escapes.

Source ids, errors, timer names, approval actions, payloads, message bodies and
a handler's or sender's stderr are other people's text. Printed raw, an
``ESC ] 0 ;`` retitles the operator's terminal and an ``ESC [ 2 J`` wipes it.
Human output shows every such character as a backslash escape; ``--json``
keeps the exact text (JSON escapes it already).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.clock import T0
from support.fixtures import Cli

# OSC title, BEL, clear screen, a C1 CSI, DEL, a carriage return, a bidi override
HOSTILE = "\x1b]0;pwned\x07|\x1b[2J|\u009b31m|\x7f|\r|\u202e"
SHOWN = ["\\x1b]0;pwned\\x07", "\\x1b[2J", "\\x9b31m", "\\x7f", "\\r", "\\u202e"]


def unsafe(text: str) -> list[str]:
    """The characters in ``text`` that a terminal would act on (a newline is fine)."""
    return sorted({c for c in text
                   if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
                   or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069})


def own(text: str) -> str:
    """What agentbox itself wrote: without the handler's and sender's relayed stderr,
    which passes through as it is when stderr is not a terminal (tests/run/
    test_run_stderr.py checks it is escaped on a terminal)."""
    return "\n".join(line for line in text.split("\n")
                     if not line.startswith(("handler: ", "sender: ")))


def assert_inert(result: Any, *streams: str) -> None:
    for name in streams or ("out", "err"):
        text = own(getattr(result, name))
        assert unsafe(text) == [], (name, text)


def assert_shown(text: str, error: bool = False) -> None:
    """Every hostile character is there as its escape; an error line turns the
    carriage return, like every other run of white space, into one space."""
    for escape in SHOWN:
        if not (error and escape == "\\r"):
            assert escape in text, (escape, text)


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide table, so an escape sequence is never folded across two lines."""
    monkeypatch.setenv("COLUMNS", "400")


def sender(tmp_path: Path, code: int) -> list[str]:
    script = tmp_path / "sender.py"
    script.write_text(f"import sys\nsys.stdin.read()\nsys.stderr.write({HOSTILE!r})\n"
                      f"sys.exit({code})\n")
    return [sys.executable, str(script)]


def handler(tmp_path: Path, answer: dict[str, Any] | None, code: int = 0) -> list[str]:
    script = tmp_path / "handler.py"
    script.write_text("import json, sys\nsys.stdin.read()\n"
                      f"sys.stderr.write({HOSTILE!r})\n"
                      f"sys.stdout.write({json.dumps(answer or {})!r})\nsys.exit({code})\n")
    return [sys.executable, str(script)]


def test_ingest_lines_escape_the_key(cli: Cli) -> None:
    first, changed = json.dumps({"text": HOSTILE}), json.dumps({"text": "changed"})
    for payload, expect in ((first, 0), (first, 0), (changed, 3)):  # stored, duplicate, conflict
        result = cli("ingest", "s" + HOSTILE, "id" + HOSTILE, "--payload", payload, now=T0)
        assert result.code == expect, result.err
        assert_inert(result)
        assert_shown(result.out)
    as_json = cli("ingest", "s" + HOSTILE, "id" + HOSTILE, "--json", now=T0)
    assert json.loads(as_json.out)["source_id"] == "id" + HOSTILE


def test_ingest_jsonl_report_escapes_keys_and_bad_lines(cli: Cli) -> None:
    lines = (json.dumps({"source": "s" + HOSTILE, "source_id": "1", "payload": {}}) + "\n"
             + json.dumps({"source": "s", "source_id": "2", "payload": {}, HOSTILE: 1}) + "\n")
    result = cli("ingest", "--jsonl", "-", now=T0, stdin=lines)
    assert result.code == 65
    assert_inert(result)
    assert_shown(result.out)


def test_run_escapes_the_handler_stderr(cli: Cli, tmp_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    result = cli("run", "--", *handler(tmp_path, None, code=1), now=T0)
    assert result.code == 1
    assert_inert(result)
    assert_shown(result.err, error=True)


def test_dead_and_dead_show_escape_everything(cli: Cli, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBOX_NOW", str(T0))
    payload = json.dumps({"text": HOSTILE})
    assert cli("ingest", "s" + HOSTILE, "id" + HOSTILE, "--payload", payload).code == 0
    assert cli("config", "set", "max_attempts", "1").code == 0
    assert cli("run", "--", *handler(tmp_path, None, code=1)).code == 1
    listed = cli("dead")
    assert listed.code == 0
    assert_inert(listed)
    assert_shown(listed.out)
    shown = cli("dead", "show", "1")
    assert shown.code == 0
    assert_inert(shown)
    assert_shown(shown.out)
    assert "\\x9b31m" in shown.out  # the payload's C1 character, which JSON leaves raw
    doc = json.loads(cli("dead", "show", "1", "--json").out)
    assert doc["payload"] == {"text": HOSTILE}
    assert doc["source_id"] == "id" + HOSTILE
    assert HOSTILE in doc["error"]


def test_status_escapes_the_timer_name_and_the_file(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / f"in{HOSTILE}box.sqlite3"
    assert cli("--db", str(db), "schedule", "add", "t" + HOSTILE, "--every", "1h",
               now=T0).code == 0
    result = cli("--db", str(db), "status", now=T0)
    assert result.code == 0
    assert_inert(result)
    assert_shown(result.out)
    doc = json.loads(cli("--db", str(db), "status", "--json", now=T0).out)
    assert doc["next_timer"]["name"] == "t" + HOSTILE
    assert doc["db"] == str(db)


def test_approvals_escape_ids_and_actions(cli: Cli) -> None:
    requested = cli("approve", "request", "a" + HOSTILE, "--expires-in", "1h",
                    "--action", "do" + HOSTILE, now=T0)
    assert requested.code == 0
    assert_inert(requested)
    assert_shown(requested.out)
    again = cli("approve", "request", "a" + HOSTILE, "--expires-in", "1h",
                "--action", "other", now=T0)
    assert again.code == 3
    assert_inert(again)
    listed = cli("approve", "list", now=T0)
    assert_inert(listed)
    assert_shown(listed.out)
    answered = cli("approve", "answer", "a" + HOSTILE, "yes", now=T0)
    assert_inert(answered)
    assert_shown(answered.out)
    doc = json.loads(cli("approve", "list", "--json", now=T0).out)
    assert doc[0]["action"] == "do" + HOSTILE


def test_schedule_escapes_names_and_payloads(cli: Cli) -> None:
    added = cli("schedule", "add", "t" + HOSTILE, "--every", "1h",
                "--payload", json.dumps({"x": HOSTILE}), now=T0)
    assert_inert(added)
    assert_shown(added.out)
    listed = cli("schedule", "list", now=T0)
    assert listed.code == 0
    assert_inert(listed)
    assert_shown(listed.out)
    assert "\\x9b31m" in listed.out.split("t\\x1b", 1)[1]  # in the payload column too
    doc = json.loads(cli("schedule", "list", "--json", now=T0).out)
    assert doc[0]["name"] == "t" + HOSTILE and doc[0]["payload"] == {"x": HOSTILE}


def test_outbox_and_dispatch_escape_bodies_and_sender_stderr(cli: Cli, tmp_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    answer = {"messages": ["hello " + HOSTILE]}
    assert cli("run", "--", *handler(tmp_path, answer), now=T0).code == 0
    sent = cli("dispatch", "--", *sender(tmp_path, 1), now=T0)
    assert sent.code == 1
    assert_inert(sent)
    assert_shown(sent.err, error=True)
    listed = cli("outbox", now=T0)
    assert listed.code == 0
    assert_inert(listed)
    assert_shown(listed.out)
    doc = json.loads(cli("outbox", "--json", now=T0).out)
    assert doc[0]["body"] == "hello " + HOSTILE and HOSTILE in doc[0]["error"]


def test_dispatch_without_a_sender_prints_the_body_exactly(cli: Cli, tmp_path: Path) -> None:
    """The body on stdout is data for a pipe, not a message: it is not escaped."""
    assert cli("ingest", "s", "1", now=T0).code == 0
    answer = {"messages": ["hello " + HOSTILE]}
    assert cli("run", "--", *handler(tmp_path, answer), now=T0).code == 0
    sent = cli("dispatch", now=T0)
    assert sent.code == 0
    assert sent.out == "hello " + HOSTILE + "\n"
    assert_inert(sent, "err")


def test_errors_on_stderr_escape_what_they_quote(cli: Cli, one_error: Any) -> None:
    bad_id = cli("dead", "show", "x" + HOSTILE, now=T0)
    assert bad_id.code == 2
    assert_inert(bad_id)
    one_error(bad_id.err)
    removed = cli("schedule", "remove", "t" + HOSTILE, now=T0)
    assert removed.code == 65
    assert_inert(removed)
    one_error(removed.err)


def test_printable_escapes_exactly_the_controls() -> None:
    from agentbox.render import printable

    for fine in ("plain text", "ünïcödé, 日本語, emoji 🙂", "عربي", ""):
        assert printable(fine) == fine
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\x00\x07\t\x7f\u0085\u009b\u202e\u2066") == (
        "\\x00\\x07\\t\\x7f\\x85\\x9b\\u202e\\u2066")
    assert printable("two\nlines") == "two\\nlines"
    assert printable("two\nlines", newlines=True) == "two\nlines"
    assert printable("a\\x1b") == "a\\x1b"  # a backslash stays itself


@given(st.text())
def test_printable_output_is_always_inert_and_keeps_the_safe_text(text: str) -> None:
    from agentbox.render import printable

    shown = printable(text)
    assert unsafe(shown) == [] and "\n" not in shown
    if not unsafe(text) and "\n" not in text and not any(0xD800 <= ord(c) <= 0xDFFF
                                                         for c in text):
        assert shown == text
    assert unsafe(printable(text, newlines=True)) == []
