"""Quiet hours against a brute-force minute model, across DST changes in named zones.

The model knows nothing of the implementation: it reads each real minute's local
hour and minute and steps until one falls outside the window.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbox.calendar import local_day
from agentbox.errors import BadInput
from agentbox.rules.outbox import held_by
from agentbox.rules.quiet import Limits, Window, parse_window, quiet, quiet_until
from support.zones import ODD_ZONES, changes

# Offsets of whole minutes only: a reading of whole seconds (Monrovia before 1972) has
# no minute boundary to end on.
ZONES = [z for z in ODD_ZONES if z != "Africa/Monrovia"]
DAY = 86_400


def model(now: int, tz: ZoneInfo, window: Window) -> int | None:
    """The first whole minute after ``now`` read outside the window (None: not quiet)."""
    def inside(t: int) -> bool:
        local = datetime.fromtimestamp(t, tz)
        minute = local.hour * 60 + local.minute
        if window.start < window.end:
            return window.start <= minute < window.end
        return minute >= window.start or minute < window.end

    if not inside(now):
        return None
    t = (now // 60 + 1) * 60
    while inside(t):
        t += 60
    return t


@st.composite
def near_a_change(draw: st.DrawFn) -> tuple[str, int]:
    """A zone and an instant within a day of one of its offset changes (or any, if none)."""
    name = draw(st.sampled_from(ZONES))
    year = draw(st.integers(2000, 2030))
    found = changes(name, year)
    if found:
        at = draw(st.sampled_from(found))
    else:
        at = int(datetime(year, 6, 1, tzinfo=UTC).timestamp())
    return name, at + draw(st.integers(-DAY, DAY))


windows = st.tuples(st.integers(0, 1439), st.integers(0, 1439)).filter(
    lambda w: w[0] != w[1]).map(lambda w: Window(*w))


@settings(max_examples=400, deadline=None)
@given(near_a_change(), windows)
def test_quiet_hours_end_where_the_minute_model_says(case: tuple[str, int],
                                                     window: Window) -> None:
    name, now = case
    tz = ZoneInfo(name)
    assert quiet_until(now, tz, window) == model(now, tz, window)


@settings(max_examples=200, deadline=None)
@given(near_a_change())
def test_a_local_day_holds_its_instant_and_starts_at_the_first_second_of_its_date(
        case: tuple[str, int]) -> None:
    name, now = case
    tz = ZoneInfo(name)
    start, end = local_day(now, tz)
    assert start <= now < end
    date = datetime.fromtimestamp(now, tz).date()
    assert datetime.fromtimestamp(start, tz).date() == date
    assert datetime.fromtimestamp(start - 1, tz).date() < date
    assert datetime.fromtimestamp(end, tz).date() > date
    assert datetime.fromtimestamp(end - 1, tz).date() == date


def test_a_berlin_night_is_quiet_until_seven_across_the_autumn_change() -> None:
    tz = ZoneInfo("Europe/Berlin")
    window = parse_window("22:00-07:00")
    night = int(datetime(2026, 10, 24, 21, 30, tzinfo=UTC).timestamp())  # 23:30 CEST
    assert quiet(night, tz, window)
    assert quiet_until(night, tz, window) == int(
        datetime(2026, 10, 25, 6, 0, tzinfo=UTC).timestamp())  # 07:00 CET, a 10.5 h night
    assert quiet_until(night - 3 * 3600, tz, window) is None


@pytest.mark.parametrize("text", ["22:00", "7:00-08:00", "22:00-22:00", "24:00-01:00", 5])
def test_quiet_hours_are_written_hh_mm_dash_hh_mm(text: object) -> None:
    with pytest.raises(BadInput):
        parse_window(text)


def sent(n: int) -> Callable[[tuple[int, int]], int]:
    """A day's count of sends, for held_by."""
    return lambda _day: n


def never_asked(day: tuple[int, int]) -> int:
    raise AssertionError(f"the day's sends were counted ({day}) with no cap to reach")


def test_what_holds_a_channel_comes_in_order_quiet_hours_cap_gap() -> None:
    quiet_now = Limits(quiet_until=500, day=(0, DAY), max_per_day=1)
    assert held_by([False], None, 60, 100, quiet_now, never_asked) == ("quiet hours", 500)
    assert held_by([True], None, 60, 100, quiet_now, never_asked) is None  # urgent: neither
    assert held_by([True], None, 60, 100, quiet_now._replace(urgent_in_quiet_hours=False),
                   never_asked) == ("quiet hours", 500)
    capped = quiet_now._replace(quiet_until=None)
    days: list[tuple[int, int]] = []
    assert held_by([False], None, 60, 100, capped,
                   lambda day: days.append(day) or 1) == ("max_per_day", DAY)
    assert days == [(0, DAY)]  # the local day's, as the limits hold it
    assert held_by([False], 90, 60, 100, capped, sent(0)) == ("gap", 150)
    assert held_by([False], 40, 60, 100, capped, sent(0)) is None
    assert held_by([], None, 60, 100, capped, never_asked) is None
    uncapped = capped._replace(day=None, max_per_day=None)
    assert held_by([False], 40, 60, 100, uncapped, never_asked) is None
