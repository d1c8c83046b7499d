"""Calendar schedules: cron in a zone across real DST changes, wall-clock times, zones."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from importlib.resources import files
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbox.calendar import (
    check_cron,
    from_local,
    local_zone,
    next_after,
    occurrences,
    zone,
)
from agentbox.clock import LAST_TIME
from agentbox.errors import BadInput, UsageError
from agentbox.rules.policy import Policy
from agentbox.rules.timers import Owed, Timer, owed

NY, BERLIN, LORD_HOWE = "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"


def at(local: str, tz: str) -> int:
    """Unix seconds of an ISO time with its offset, checked to be a real reading in ``tz``."""
    moment = datetime.fromisoformat(local)
    assert moment.utcoffset() == moment.astimezone(zone(tz)).utcoffset(), local
    return int(moment.timestamp())


def reading(t: int, tz: str) -> str:
    """How the clock on the wall in ``tz`` reads at ``t``, offset included."""
    return datetime.fromtimestamp(t, zone(tz)).isoformat()


def walk(expr: str, tz: str, start: str, until: str) -> list[str]:
    """Every occurrence after ``start`` up to ``until``, read on the wall clock."""
    end = at(until, tz)
    found = []
    for t in occurrences(check_cron(expr), zone(tz), at(start, tz)):
        if t > end:
            break
        found.append(reading(t, tz))
    return found


# -- daily timers keep their local time, once a day, on both sides of a change

@pytest.mark.parametrize(("tz", "start", "until", "expected"), [
    (BERLIN, "2026-03-28T00:00+01:00", "2026-03-30T23:00+02:00",
     ["2026-03-28T08:00:00+01:00", "2026-03-29T08:00:00+02:00", "2026-03-30T08:00:00+02:00"]),
    (BERLIN, "2026-10-24T00:00+02:00", "2026-10-26T23:00+01:00",
     ["2026-10-24T08:00:00+02:00", "2026-10-25T08:00:00+01:00", "2026-10-26T08:00:00+01:00"]),
    (NY, "2026-03-07T00:00-05:00", "2026-03-09T23:00-04:00",
     ["2026-03-07T08:00:00-05:00", "2026-03-08T08:00:00-04:00", "2026-03-09T08:00:00-04:00"]),
    (NY, "2026-10-31T00:00-04:00", "2026-11-02T23:00-05:00",
     ["2026-10-31T08:00:00-04:00", "2026-11-01T08:00:00-05:00", "2026-11-02T08:00:00-05:00"]),
    (LORD_HOWE, "2026-04-04T00:00+11:00", "2026-04-06T23:00+10:30",
     ["2026-04-04T08:00:00+11:00", "2026-04-05T08:00:00+10:30", "2026-04-06T08:00:00+10:30"]),
    (LORD_HOWE, "2026-10-03T00:00+10:30", "2026-10-05T23:00+11:00",
     ["2026-10-03T08:00:00+10:30", "2026-10-04T08:00:00+11:00", "2026-10-05T08:00:00+11:00"]),
])
def test_a_daily_timer_fires_at_the_same_local_time_each_day(
        tz: str, start: str, until: str, expected: list[str]) -> None:
    assert walk("0 8 * * *", tz, start, until) == expected


# -- a wall-clock time the clocks skip fires once, at the end of the gap

@pytest.mark.parametrize(("expr", "tz", "start", "until", "expected"), [
    ("30 2 * * *", NY, "2026-03-07T12:00-05:00", "2026-03-09T12:00-04:00",
     ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]),
    ("30 2 * * *", BERLIN, "2026-03-28T12:00+01:00", "2026-03-30T12:00+02:00",
     ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    ("15 2 * * *", LORD_HOWE, "2026-10-03T12:00+10:30", "2026-10-05T12:00+11:00",
     ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]),
    # several skipped times, and the first time after the gap, fire there once
    ("0,30 2,3 * * *", NY, "2026-03-08T00:00-05:00", "2026-03-08T12:00-04:00",
     ["2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"]),
])
def test_a_skipped_wall_clock_time_fires_once_after_the_gap(
        expr: str, tz: str, start: str, until: str, expected: list[str]) -> None:
    assert walk(expr, tz, start, until) == expected


# -- a wall-clock time the clocks show twice fires at its first pass only

@pytest.mark.parametrize(("expr", "tz", "start", "until", "expected"), [
    ("30 1 * * *", NY, "2026-10-31T12:00-04:00", "2026-11-02T12:00-05:00",
     ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]),
    ("30 2 * * *", BERLIN, "2026-10-24T12:00+02:00", "2026-10-26T12:00+01:00",
     ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ("45 1 * * *", LORD_HOWE, "2026-04-04T12:00+11:00", "2026-04-06T12:00+10:30",
     ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]),
])
def test_a_repeated_wall_clock_time_fires_once(
        expr: str, tz: str, start: str, until: str, expected: list[str]) -> None:
    assert walk(expr, tz, start, until) == expected


def test_from_inside_the_repeated_hour_its_first_pass_is_behind() -> None:
    second_pass = at("2026-11-01T01:15-05:00", NY)
    assert reading(next_after("30 1 * * *", NY, second_pass) or 0, NY) == (
        "2026-11-02T01:30:00-05:00")
    first_pass = at("2026-11-01T01:15-04:00", NY)
    assert reading(next_after("30 1 * * *", NY, first_pass) or 0, NY) == (
        "2026-11-01T01:30:00-04:00")


# -- wildcard minute or hour: elapsed time, both passes of a repeated hour

def test_an_hourly_timer_follows_elapsed_time() -> None:
    assert walk("0 * * * *", NY, "2026-11-01T00:30-04:00", "2026-11-01T02:30-05:00") == [
        "2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"]
    assert walk("0 * * * *", NY, "2026-03-08T00:30-05:00", "2026-03-08T04:30-04:00") == [
        "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"]


def test_the_repeated_hour_ends_in_order() -> None:
    assert walk("* 1-2 * * *", NY, "2026-11-01T01:57-05:00", "2026-11-01T02:01-05:00") == [
        "2026-11-01T01:58:00-05:00", "2026-11-01T01:59:00-05:00", "2026-11-01T02:00:00-05:00",
        "2026-11-01T02:01:00-05:00"]


def test_a_quarter_hourly_timer_never_falls_silent_in_lord_howe() -> None:
    fired = walk("*/15 * * * *", LORD_HOWE, "2026-04-05T01:20+11:00", "2026-04-05T02:05+10:30")
    assert fired == ["2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
                     "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30",
                     "2026-04-05T02:00:00+10:30"]
    times = [datetime.fromisoformat(f) for f in fired]
    assert {b - a for a, b in pairwise(times)} == {timedelta(minutes=15)}


# -- what a due timer owes after an outage

def due_timer(due: int, catch_up: str = "coalesce", every: int | None = None,
              cron: str | None = None, tz: str | None = None) -> Timer:
    return Timer("t", due, every, "{}", catch_up, None, None, False, 0, cron, tz)


def weekdays(due: int, back: int, catch_up: str, limit: int) -> Owed:
    timer = due_timer(due, catch_up, cron="0 8 * * 1-5", tz=NY)
    return owed(timer, back, Policy(catch_up_limit=limit))



def test_a_four_day_outage_of_a_weekday_timer_across_spring_forward() -> None:
    due = at("2026-03-09T08:00-04:00", NY)  # Monday, the day after clocks went forward
    back = at("2026-03-13T09:00-04:00", NY)  # Friday, an hour late
    coalesced = weekdays(due, back, "coalesce", 100)
    assert [(reading(t, NY), skipped) for t, skipped in coalesced.events] == [
        ("2026-03-13T08:00:00-04:00", 4)]
    assert reading(coalesced.next_due or 0, NY) == "2026-03-16T08:00:00-04:00"
    each = weekdays(due, back, "each", 100)
    assert [(reading(t, NY), skipped) for t, skipped in each.events] == [
        (f"2026-03-{day:02}T08:00:00-04:00", 0) for day in range(9, 14)]
    bounded = weekdays(due, back, "each", 3)
    assert [(reading(t, NY), skipped) for t, skipped in bounded.events] == [
        ("2026-03-09T08:00:00-04:00", 0), ("2026-03-10T08:00:00-04:00", 0),
        ("2026-03-13T08:00:00-04:00", 2)]
    assert bounded.next_due == each.next_due == coalesced.next_due


def test_an_outage_over_a_weekend_and_fall_back_counts_weekdays_only() -> None:
    due = at("2026-10-23T08:30+02:00", BERLIN)  # Friday; clocks go back on Sunday the 25th
    back = at("2026-10-27T12:00+01:00", BERLIN)
    result = owed(due_timer(due, "each", cron="30 8 * * 1-5", tz=BERLIN), back, Policy())
    assert [reading(t, BERLIN) for t, _ in result.events] == [
        "2026-10-23T08:30:00+02:00", "2026-10-26T08:30:00+01:00", "2026-10-27T08:30:00+01:00"]
    assert reading(result.next_due or 0, BERLIN) == "2026-10-28T08:30:00+01:00"


def test_a_timer_on_time_owes_one_event_and_a_one_off_is_spent() -> None:
    due = at("2026-03-09T08:00-04:00", NY)
    assert weekdays(due, due, "each", 5).events == ((due, 0),)
    once = owed(due_timer(due), due + 999, Policy())
    assert once == Owed(((due, 0),), None)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10_000), st.integers(0, 10**6), st.integers(0, 10**6),
       st.sampled_from(["coalesce", "each"]), st.integers(1, 8))
def test_every_owes_what_stepping_through_its_occurrences_gives(
        seconds: int, due: int, late: int, catch_up: str, limit: int) -> None:
    now = due + late
    due_ones = list(range(due, now + 1, seconds))
    result = owed(due_timer(due, catch_up, every=seconds), now, Policy(catch_up_limit=limit))
    if catch_up == "coalesce" or len(due_ones) <= limit:
        expected = ([(due_ones[-1], len(due_ones) - 1)] if catch_up == "coalesce"
                    else [(t, 0) for t in due_ones])
    else:
        expected = [(t, 0) for t in due_ones[:limit - 1]] + [(due_ones[-1],
                                                               len(due_ones) - limit)]
    assert list(result.events) == expected
    assert result.next_due == due_ones[-1] + seconds


# -- reading expressions

@pytest.mark.parametrize(("expr", "spelled"), [
    ("0 8 * * 1-5", "0 8 * * 1-5"), ("  */15\t9-17 * *   MON-FRI ", "*/15 9-17 * * MON-FRI"),
    ("0 0 L * *", "0 0 L * *"), ("0 0 29 2 *", "0 0 29 2 *"),
])
def test_check_cron_single_spaces_the_fields(expr: str, spelled: str) -> None:
    assert check_cron(expr) == spelled


@pytest.mark.parametrize(("expr", "needle"), [
    ("61 * * * *", "bad minute field"), ("0 24 * * *", "bad hour field"),
    ("0 0 30 2 *", "bad day-of-month field"), ("0 0 * 13 *", "bad month field"),
    ("0 0 * * 8", "bad day-of-week field"), ("*/0 * * * *", "bad minute field"),
    ("0 8 * *", "five fields"), ("0 0 8 * * *", "five fields"), ("@daily", "five fields"),
    ("", "five fields"), ("٣ * * * *", "five fields"), ("1," * 150 + "2 * * * *", "five fields"),
])
def test_check_cron_refuses_with_the_field_named(expr: str, needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        check_cron(expr)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789*/-,LW# MONFRIJASUTEDCV\t\x00é", max_size=30))
def test_any_text_is_read_or_refused_as_bad_input(text: str) -> None:
    try:
        spelled = check_cron(text)
    except BadInput:
        return
    next_after(spelled, "UTC", 0)  # a readable expression can be evaluated


def test_no_occurrence_past_the_year_9999() -> None:
    assert next_after("0 0 1 1 *", "UTC", LAST_TIME - 10) is None
    assert next_after("0 0 1 1 *", "Pacific/Kiritimati", LAST_TIME - 86_400) is None


# -- wall-clock times for --at and --start

def test_a_time_the_clocks_skip_is_refused() -> None:
    for wall, tz in ((datetime(2026, 3, 8, 2, 30), NY), (datetime(2026, 3, 29, 2, 0), BERLIN),
                     (datetime(2026, 10, 4, 2, 15), LORD_HOWE)):
        with pytest.raises(BadInput, match=f"does not exist in {tz}"):
            from_local(wall, zone(tz))
    assert from_local(datetime(2026, 3, 8, 3, 0), zone(NY)) == at("2026-03-08T03:00-04:00", NY)


def test_a_time_the_clocks_show_twice_is_its_first_pass() -> None:
    assert from_local(datetime(2026, 11, 1, 1, 30), zone(NY)) == at(
        "2026-11-01T01:30-04:00", NY)
    assert from_local(datetime(2026, 4, 5, 1, 45), zone(LORD_HOWE)) == at(
        "2026-04-05T01:45+11:00", LORD_HOWE)


def test_a_wall_clock_time_past_the_last_year_is_refused() -> None:
    with pytest.raises(BadInput, match="outside the years"):
        from_local(datetime(9999, 12, 31, 23, 0), zone("America/Los_Angeles"))


# -- zones

@pytest.mark.parametrize("name", ["Bogus/Zone", "America", "../etc/passwd", "/etc/localtime",
                                  "", "utc", "zone.tab", "a\x00b"])
def test_an_unknown_zone_is_bad_input(name: str) -> None:
    with pytest.raises(BadInput, match="unknown time zone"):
        zone(name)


def test_local_zone_config_then_tz_then_the_system(tmp_path: Path) -> None:
    missing = tmp_path / "no-localtime"
    assert local_zone(BERLIN, {"TZ": NY}, missing).key == BERLIN
    assert local_zone(None, {"TZ": NY}, missing).key == NY
    assert local_zone(None, {"TZ": f":{NY}"}, missing).key == NY
    assert local_zone(None, {}, missing).key == "UTC"
    assert local_zone(None, {"TZ": ""}, missing).key == "UTC"  # empty counts as unset


def test_local_zone_names_a_zone_file_by_its_place(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(files("tzdata").joinpath("zoneinfo", "Australia", "Lord_Howe").read_bytes())
    tree = tmp_path / "zoneinfo" / "Australia"
    tree.mkdir(parents=True)
    shutil.copy(source, tree / "Lord_Howe")
    link = tmp_path / "localtime"
    link.symlink_to(tree / "Lord_Howe")
    assert local_zone(None, {}, link).key == LORD_HOWE
    assert local_zone(None, {"TZ": str(tree / "Lord_Howe")}, tmp_path / "none").key == LORD_HOWE
    loose = tmp_path / "copy"
    shutil.copy(source, loose)  # a copied file outside any zoneinfo folder: no name
    nameless = local_zone(None, {}, loose)
    assert nameless.key is None
    assert from_local(datetime(2026, 4, 5, 1, 45), nameless) == at(
        "2026-04-05T01:45+11:00", LORD_HOWE)


@pytest.mark.parametrize(("configured", "environ", "needle"), [
    ("Mars/Olympus", {}, "config timezone"),
    (None, {"TZ": "EST5EDT,M3.2.0,M11.1.0"}, "TZ="),
    (None, {"TZ": "/nonexistent/zone"}, "cannot read a time zone"),
])
def test_a_bad_configured_zone_is_a_usage_error(tmp_path: Path, configured: str | None,
                                                environ: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        local_zone(configured, environ, tmp_path / "none")
