"""A user's own scenario files: run, fail where they differ, refused when malformed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HEAD = 'title = "mine"\n'


def _write(tmp_path: Path, text: str, name: str = "mine.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_users_file_runs_and_reports_what_differs(
        cli: Callable[..., Any], tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + """
[settings]
lease_ttl = "1m"

[[step]]
do = "acquire"
worker = "A"
expect = 1

[[step]]
do = "acquire"
label = "B after A's one-minute lease"
at = "+61s"
worker = "B"
expect = 1
""")
    result = cli("scenarios", path, "--json")
    assert result.code == 1
    steps = json.loads(result.out)["scenarios"][0]["steps"]
    assert [s["ok"] for s in steps] == [True, False]
    assert steps[1]["observed"] == 2 and steps[1]["clock"] == "+1m1s"


def test_text_from_a_file_is_shown_literally(cli: Callable[..., Any], tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + """
[[step]]
do = "ingest"
label = "[bold]not markup[/bold]"
source = "s"
id = "[red]x"
expect = "stored"
""")
    result = cli("scenarios", path)
    assert result.code == 0, result.err
    assert "[bold]not markup[/bold]" in result.out


@pytest.mark.parametrize(("body", "where", "says"), [
    ('[[step]]\ndo = "ingest"\nsource = "a"\nexpect = true\n', "step 1 (ingest)",
     "missing field 'id'"),
    ('[[step]]\ndo = "tick"\nexpect = 0\n[[step]]\ndo = "teleport"\n', "step 2",
     "unknown step kind 'teleport'"),
    ('[[step]]\ndo = "acquire"\nworker = 5\nexpect = 1\n', "step 1 (acquire)",
     "field 'worker' must be a non-empty string"),
    ('[[step]]\ndo = "acquire"\nworker = "A"\nexpect = true\n', "step 1 (acquire)",
     "field 'expect' must be a generation"),
    ('[[step]]\ndo = "tick"\nexpect = 0\n[[step]]\ndo = "advance"\nby = "soon"\n',
     "step 2 (advance)", "not a duration"),
    ('[[step]]\ndo = "tick"\n', "step 1 (tick)", "missing field 'expect'"),
    ('[[step]]\ndo = "tick"\nexpect = 0\nwhen = 3\n', "step 1 (tick)", "unknown field 'when'"),
    ('[[step]]\ndo = "claim"\nworker = "A"\nexpect = []\n', "step 1 (claim)",
     "has not acquired the lease"),
    ('[[step]]\ndo = "run"\nworker = "A"\nmessages = [3]\nexpect = []\n', "step 1 (run)",
     "messages[0]"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\nexpect = "added"\n', "step 1 (add_timer)",
     "needs one of 'every' or 'cron'"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\nevery = "1d"\ncron = "0 8 * * *"\n'
     'expect = "added"\n', "step 1 (add_timer)", "needs one of 'every' or 'cron'"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\ncron = "61 * * * *"\nexpect = "added"\n',
     "step 1 (add_timer)", "field 'cron' cron expression '61 * * * *': bad minute field"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\ncron = "0 8 * * *"\ntz = "Mars/Base"\n'
     'expect = "added"\n', "step 1 (add_timer)", "field 'tz' unknown time zone"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\nevery = "1d"\ntz = "UTC"\nexpect = "added"\n',
     "step 1 (add_timer)", "'tz' goes with 'cron'"),
    ('[[step]]\ndo = "add_timer"\nname = "t"\ncron = "0 8 * * *"\nstart = "+1h"\n'
     'expect = "added"\n', "step 1 (add_timer)", "'start' is for an 'every' timer"),
    ('[[step]]\ndo = "tick"\nat = 2026-03-08T03:00:00\nexpect = 0\n', "step 1 (tick)",
     "a date-time with an offset"),
])
def test_a_malformed_step_is_one_line_naming_file_and_step(
        cli: Callable[..., Any], tmp_path: Path, body: str, where: str, says: str) -> None:
    path = _write(tmp_path, HEAD + body)
    result = cli("scenarios", path)
    assert result.code == 65, result.out + result.err
    assert result.out == ""
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
    assert f"{path}: {where}: " in result.err
    assert says in result.err


@pytest.mark.parametrize(("text", "says"), [
    ('title = "x"\n[[step]\n', "invalid TOML"),
    ('[[step]]\ndo = "tick"\nexpect = 0\n', "missing 'title'"),
    (HEAD, "no steps"),
    (HEAD + '[settings]\nlease_ttl = "soon"\n[[step]]\ndo = "tick"\nexpect = 0\n',
     "settings: lease_ttl"),
    (HEAD + '[settings]\nhandler = "x"\n[[step]]\ndo = "tick"\nexpect = 0\n',
     "unknown setting 'handler'"),
    (HEAD + 'steps = 1\n', "unknown key 'steps'"),
    (HEAD + 'start = 2026-03-08\n[[step]]\ndo = "tick"\nexpect = 0\n',
     "or a date-time with an offset"),
])
def test_a_malformed_file_is_one_line_naming_the_file(
        cli: Callable[..., Any], tmp_path: Path, text: str, says: str) -> None:
    path = _write(tmp_path, text)
    result = cli("scenarios", path)
    assert result.code == 65
    assert result.err.startswith(f"agentbox: error: {path}: ")
    assert says in result.err and result.err.count("\n") == 1


def test_cron_timers_read_times_in_their_zone(cli: Callable[..., Any], tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + """
start = 2026-03-08T01:00:00-05:00

[[step]]
do = "add_timer"
name = "utc"
cron = "30 2 * * *"
expect = "added"

[[step]]
do = "add_timer"
name = "ny"
cron = "30 2 * * *"
tz = "America/New_York"
expect = "added"

[[step]]
do = "next_due"
label = "without tz, a scenario's cron timer is in UTC"
timer = "utc"
tz = "UTC"
expect = "2026-03-09T02:30:00+00:00"

[[step]]
do = "next_due"
timer = "ny"
unit = "min"
expect = 60

[[step]]
do = "tick"
at = 2026-03-08T03:00:00-04:00
expect = 1

[[step]]
do = "payload"
timer = "ny"
field = "scheduled_for"
expect = 1772953200
""")
    result = cli("scenarios", path, "--json")
    assert result.code == 0, result.out + result.err
    steps = json.loads(result.out)["scenarios"][0]["steps"]
    assert steps[4]["clock"] == "+1h"  # the clocks skipped from 02:00 to 03:00


def test_a_bad_file_stops_before_anything_runs(cli: Callable[..., Any], tmp_path: Path) -> None:
    bad = _write(tmp_path, HEAD + '[[step]]\ndo = "nope"\n', "bad.toml")
    result = cli("scenarios", "1", bad)
    assert result.code == 65 and result.out == ""
