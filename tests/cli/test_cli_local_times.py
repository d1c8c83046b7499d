"""Times written without a zone: read in config `timezone`, else TZ; never silently moved."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from support.clock import T0_2023
from support.fixtures import Cli


def due(cli: Cli) -> list[int]:
    result = cli("schedule", "list", "--json", now=T0_2023)
    assert result.code == 0, result.err
    return [t["due"] for t in json.loads(result.out)]


def seconds(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp())


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")


@pytest.mark.usefixtures("new_york")
@pytest.mark.parametrize("argv", [
    ["--at", "2026-03-08T02:30"],
    ["--every", "1d", "--start", "2026-03-08T02:30"],
    ["--at", "2026-03-08T02:00:00"],
], ids=["at", "start", "gap-start"])
def test_a_local_time_the_clocks_skip_is_refused(cli: Cli, one_error: Any,
                                                 argv: list[str]) -> None:
    result = cli("schedule", "add", "x", *argv, now=T0_2023)
    assert result.code == 65
    line = one_error(result.err)
    assert "does not exist in America/New_York" in line and argv[-2] in line
    assert due(cli) == []


@pytest.mark.usefixtures("new_york")
def test_local_times_are_read_in_tz_and_a_repeated_one_is_its_first_pass(cli: Cli) -> None:
    assert cli("schedule", "add", "before", "--at", "2026-03-08T01:59", now=T0_2023).code == 0
    assert cli("schedule", "add", "after", "--at", "2026-03-08T03:00", now=T0_2023).code == 0
    assert cli("schedule", "add", "twice", "--at", "2026-11-01T01:30", now=T0_2023).code == 0
    assert due(cli) == [seconds("2026-03-08T01:59-05:00"), seconds("2026-03-08T03:00-04:00"),
                        seconds("2026-11-01T01:30-04:00")]


@pytest.mark.usefixtures("new_york")
def test_an_explicit_offset_or_unix_seconds_ignore_the_zone(cli: Cli) -> None:
    assert cli("schedule", "add", "a", "--at", "2026-03-08T02:30-05:00", now=T0_2023).code == 0
    assert cli("schedule", "add", "b", "--at", "1772955000", now=T0_2023).code == 0
    assert due(cli) == [1772955000, seconds("2026-03-08T02:30-05:00")]


def test_config_timezone_wins_over_tz(cli: Cli, monkeypatch: pytest.MonkeyPatch,
                                      one_error: Any) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    assert cli("config", "set", "timezone", "Europe/Berlin").code == 0
    refused = cli("schedule", "add", "x", "--at", "2026-03-29T02:30", now=T0_2023)
    assert refused.code == 65
    assert "does not exist in Europe/Berlin" in one_error(refused.err)
    assert cli("schedule", "add", "x", "--at", "2026-03-08T02:30", now=T0_2023).code == 0
    assert due(cli) == [seconds("2026-03-08T02:30+01:00")]


def test_config_set_refuses_an_unknown_zone(cli: Cli, one_error: Any) -> None:
    for name in ("Mars/Olympus", "Europe", "../../etc/passwd", ""):
        result = cli("config", "set", "timezone", name)
        assert result.code == 2
        one_error(result.err)
    shown = json.loads(cli("config", "show", "--json").out)
    assert {r["key"]: r["value"] for r in shown}["timezone"] is None


def test_a_tz_agentbox_cannot_read_is_a_usage_error_only_when_needed(
        cli: Cli, monkeypatch: pytest.MonkeyPatch, one_error: Any) -> None:
    monkeypatch.setenv("TZ", "EST5EDT,M3.2.0,M11.1.0")
    assert cli("schedule", "add", "soon", "--at", "+1h", now=T0_2023).code == 0
    result = cli("schedule", "add", "x", "--at", "2026-03-08T02:30", now=T0_2023)
    assert result.code == 2
    assert "TZ=" in one_error(result.err)


def test_a_bad_spelling_is_still_a_usage_error(cli: Cli, new_york: None,
                                               one_error: Any) -> None:
    result = cli("schedule", "add", "x", "--at", "2026-02-30T10:00", now=T0_2023)
    assert result.code == 2
    assert "--at" in one_error(result.err)
