"""Durations (90s, 15m, 4h, 1d, 1h30m) and points in time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbox.durations import MAX_SECONDS, format_duration, parse_duration, parse_time
from agentbox.errors import BadInput


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("15m", 900), ("4h", 14_400), ("1d", 86_400), ("1w", 604_800),
    ("1h30m", 5_400), ("90", 90), (" 2M ", 120), (45, 45),
])
def test_parse(text: Any, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [
    "", "0", "0s", "-5", "1.5", "1.5h", "h", "1x", "1h 30m", "٣s", "²", True, 1.5, None, [],
    f"{MAX_SECONDS + 1}",
])
def test_refused(text: Any) -> None:
    with pytest.raises(BadInput):
        parse_duration(text)


@settings(max_examples=60, deadline=None)  # a busy machine must not flake
@given(st.integers(min_value=1, max_value=MAX_SECONDS))
def test_format_round_trips(seconds: int) -> None:
    spelled = format_duration(seconds)
    assert parse_duration(spelled) == seconds


def test_format_is_shortest() -> None:
    assert format_duration(5_400) == "1h30m"
    assert format_duration(86_400) == "1d"
    assert format_duration(0) == "0s"


@pytest.mark.parametrize(("text", "expected"), [
    ("now", 1_000), ("+1h", 4_600), ("1700000000", 1_700_000_000), ("-5", -5),
    ("2024-01-01T00:00:00Z", 1_704_067_200), ("2024-01-01T01:00:00+01:00", 1_704_067_200),
])
def test_parse_time(text: str, expected: int) -> None:
    assert parse_time(text, 1_000) == expected


def test_a_time_without_a_zone_is_a_wall_clock_reading() -> None:
    # placing it in a zone is calendar.from_local's job, which refuses skipped times
    assert parse_time("2026-03-08T02:30", 1_000) == datetime(2026, 3, 8, 2, 30)
    assert parse_time(" 0001-01-01 ", 1_000) == datetime(1, 1, 1)


@pytest.mark.parametrize("text", ["soon", "--5", "²", "+0", "+x", "", "2026-02-30T10:00"])
def test_parse_time_refused(text: str) -> None:
    with pytest.raises(BadInput):
        parse_time(text, 1_000)


def test_parse_time_reads_a_time_the_range_refuses_later() -> None:
    # spelled right but before 1970: clock.check_time refuses it as bad input, not a typo
    assert parse_time("0001-01-01T00:00+01:00", 1_000) == -62_135_600_400
