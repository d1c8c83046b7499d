"""`schedule add --cron EXPR [--tz ZONE]`: calendar timers from the command line."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from support.fixtures import Cli

FRI_1200_EST = 1772816400  # 2026-03-06; clocks spring forward in New York on Sunday the 8th
MON_0800_EDT = 1773057600


def listed(cli: Cli, now: int = FRI_1200_EST) -> list[dict[str, Any]]:
    result = cli("schedule", "list", "--json", now=now)
    assert result.code == 0, result.err
    return list(json.loads(result.out))


def test_a_cron_timer_is_first_due_at_its_next_match(cli: Cli) -> None:
    added = cli("schedule", "add", "standup", "--cron", "0 8 * * 1-5", "--tz",
                "America/New_York", "--json", now=FRI_1200_EST)
    assert added.code == 0, added.err
    assert json.loads(added.out) == {"outcome": "added", "name": "standup", "due": MON_0800_EDT,
                                     "every": None, "cron": "0 8 * * 1-5",
                                     "tz": "America/New_York", "catch_up": "coalesce"}
    assert cli("schedule", "add", "digest", "--every", "1d", now=FRI_1200_EST).code == 0
    by_name = {t["name"]: t for t in listed(cli)}
    assert {k: by_name["standup"][k] for k in ("due", "every", "cron", "tz")} == {
        "due": MON_0800_EDT, "every": None, "cron": "0 8 * * 1-5", "tz": "America/New_York"}
    assert (by_name["digest"]["cron"], by_name["digest"]["tz"]) == (None, None)
    assert by_name["digest"]["due"] == FRI_1200_EST  # --every: due at once


def test_list_shows_the_expression_the_zone_and_both_clocks(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one table row per timer
    monkeypatch.setenv("TZ", "Europe/Berlin")
    cli("schedule", "add", "standup", "--cron", "0  8 * *   1-5", "--tz", "America/New_York",
        now=FRI_1200_EST)
    cli("schedule", "add", "digest", "--every", "1d", now=FRI_1200_EST)
    table = cli("schedule", "list", now=FRI_1200_EST)
    assert table.code == 0
    standup = next(line for line in table.out.splitlines() if "standup" in line)
    for shown in ("cron 0 8 * * 1-5 (America/New_York)", "2026-03-09T08:00:00-04:00",
                  "2026-03-09T12:00:00Z"):
        assert shown in standup, standup
    digest = next(line for line in table.out.splitlines() if "digest" in line)
    assert "2026-03-06T18:00:00+01:00" in digest and "every 1d" in digest  # in TZ's zone


def test_ticks_fire_at_local_times_and_re_adding_changes_nothing(cli: Cli) -> None:
    spec = ("schedule", "add", "standup", "--cron", "0 8 * * 1-5", "--tz", "America/New_York")
    cli(*spec, now=FRI_1200_EST)
    tick = cli("schedule", "tick", "--json", now=MON_0800_EDT + 4 * 86_400 + 3_600)
    assert json.loads(tick.out) == {"due": 1}
    assert cli(*spec, now=MON_0800_EDT + 5 * 86_400).out.strip() == "timer standup unchanged"
    [timer] = listed(cli)
    assert timer["due"] == MON_0800_EDT + 7 * 86_400
    moved = cli(*spec[:4], "0 9 * * 1-5", "--tz", "America/New_York", now=FRI_1200_EST)
    assert moved.code == 3


@pytest.mark.parametrize(("argv", "says"), [
    (["--cron", "0 8 * * *", "--every", "1d"], "one of --every"),
    (["--cron", "0 8 * * *", "--at", "+1h"], "one of --every"),
    (["--every", "1d", "--tz", "UTC"], "--tz goes with --cron"),
    (["--cron", "0 8 * * *", "--start", "+1h"], "--start goes with --every"),
    (["--at", "+1h", "--catch-up", "each"], "--catch-up goes with --every or --cron"),
    ([], "one of --every"),
])
def test_schedules_are_one_of_every_at_or_cron(cli: Cli, one_error: Any, argv: list[str],
                                               says: str) -> None:
    result = cli("schedule", "add", "x", *argv, now=FRI_1200_EST)
    assert result.code == 2
    assert says in one_error(result.err)
    assert listed(cli) == []


@pytest.mark.parametrize(("argv", "says"), [
    (["--cron", "61 * * * *"], "--cron: cron expression '61 * * * *': bad minute field"),
    (["--cron", "0 8 * *"], "five fields"),
    (["--cron", "0 0 30 2 *"], "bad day-of-month field"),
    (["--cron", "0 8 * * *", "--tz", "Mars/Olympus"], "--tz: unknown time zone 'Mars/Olympus'"),
    (["--cron", "0 8 * * *", "--payload", '{"skipped": 1}'], "cannot use the key(s) skipped"),
])
def test_a_bad_expression_or_zone_is_bad_input(cli: Cli, one_error: Any, argv: list[str],
                                               says: str) -> None:
    result = cli("schedule", "add", "x", *argv, now=FRI_1200_EST)
    assert result.code == 65
    assert says in one_error(result.err)
    assert listed(cli) == []


def test_the_zone_defaults_to_config_then_tz(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Australia/Lord_Howe")
    assert cli("schedule", "add", "a", "--cron", "0 8 * * *", now=FRI_1200_EST).code == 0
    assert cli("config", "set", "timezone", "Europe/Berlin").code == 0
    assert cli("schedule", "add", "b", "--cron", "0 8 * * *", now=FRI_1200_EST).code == 0
    assert {t["name"]: t["tz"] for t in listed(cli)} == {"a": "Australia/Lord_Howe",
                                                         "b": "Europe/Berlin"}


def test_a_nameless_local_zone_cannot_be_kept(cli: Cli, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path, one_error: Any) -> None:
    copy = tmp_path / "my-zone"
    copy.write_bytes(files("tzdata").joinpath("zoneinfo", "Europe", "Berlin").read_bytes())
    monkeypatch.setenv("TZ", str(copy))  # a zone file outside any zoneinfo folder
    assert cli("schedule", "add", "at", "--at", "2026-03-29T03:00", now=FRI_1200_EST).code == 0
    result = cli("schedule", "add", "x", "--cron", "0 8 * * *", now=FRI_1200_EST)
    assert result.code == 2
    assert "--tz" in one_error(result.err)
    assert cli("schedule", "add", "x", "--cron", "0 8 * * *", "--tz", "Europe/Berlin",
               now=FRI_1200_EST).code == 0
