"""A cron timer far behind: Cron.span counts what it owes instead of walking it.

The answer must be exactly the walker's (the latest occurrence up to now, how
many occurrences after the due one, the next one), which
tests/unit/test_calendar_oracle.py proves against a minute-by-minute oracle;
here the walker is the brute force, over windows of days to years, across
DST zones, for expressions with ``L``, ``LW``, ``5L`` and ``#`` too. And the
count must not cost time per occurrence: twenty years of ``* * * * *`` is
ten million of them.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentbox.calendar import Cron, _readings, check_cron, next_after, occurrences
from agentbox.clock import LAST_TIME
from agentbox.errors import BadInput
from agentbox.rules.policy import Policy
from agentbox.rules.timers import Timer, owed
from support.zones import ALL_ZONES, ODD_ZONES, changes

DAY = 86_400
YEAR = 365 * DAY
DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham",
             "America/Havana", "Asia/Gaza", "Antarctica/Troll", "Europe/Dublin",
             "America/Santiago", "Africa/Casablanca", "America/St_Johns", "Europe/London",
             "Australia/Sydney", "America/Los_Angeles", "America/Sao_Paulo", "Asia/Tehran",
             "Pacific/Apia", "Africa/Monrovia", "America/Asuncion"]  # changes some years
WALK_LIMIT = 20_000  # occurrences the brute force walks at most per example


def walked(expr: str, tz: str, first: int, now: int) -> tuple[int, int, int | None]:
    """What Cron.span answered before it counted: every occurrence walked in turn."""
    latest, missed = first, 0
    for at in occurrences(expr, ZoneInfo(tz), first):
        if at > now:
            return latest, missed, at
        latest, missed = at, missed + 1
    return latest, missed, None


def field(lo: int, hi: int) -> st.SearchStrategy[str]:
    n = st.integers(lo, hi)
    return st.one_of(
        st.just("*"), n.map(str), st.integers(2, max(2, (hi - lo) // 2)).map(lambda k: f"*/{k}"),
        st.tuples(n, n).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.tuples(n, n, st.integers(2, 5)).map(lambda abk: f"{min(abk[:2])}-{max(abk[:2])}"
                                               f"/{abk[2]}"),
        st.lists(n, min_size=2, max_size=5, unique=True).map(lambda v: ",".join(map(str, v))))


STAR = st.just("*")
DOM = st.one_of(STAR, STAR, field(1, 31), st.sampled_from(["L", "LW", "1,L", "15,LW", "29"]))
DOW = st.one_of(STAR, STAR, field(0, 7), st.sampled_from(["5L", "MON#2", "1#5", "FRI#1,SUN",
                                                           "SAT-SUN", "0L", "3#4"]))
MONTH = st.one_of(STAR, STAR, field(1, 12), st.sampled_from(["FEB", "MAR-APR,OCT", "*/3"]))


def readable(text: str) -> bool:
    try:
        check_cron(text)
    except BadInput:  # a day no month has (30 February): refused when read
        return False
    return True


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, str, int, int]:
    """(expression, zone, first, now): ``first`` an occurrence, as a timer's due time is,
    and ``now`` up to as far behind as the walk can go. Three in four start just before
    a change of the zone's offset, with an expression firing in the hours the clocks
    read around it, and end after it or many changes later."""
    across = draw(st.integers(0, 3)) > 0
    tz = draw(st.sampled_from(DST_ZONES if across else ODD_ZONES + ALL_ZONES))
    year = draw(st.one_of(st.integers(1971, 2040), st.integers(2041, 9990),
                          st.just(9999) if not across else st.integers(9980, 9998)))
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp()) + draw(st.integers(0, YEAR))
    change, hours = None, field(0, 23)
    if across and changes(tz, year):
        change = draw(st.sampled_from(changes(tz, year)))
        start = change - draw(st.integers(0, 3 * DAY))
        # the hours read on either side, and those the clocks skip or repeat
        before = datetime.fromtimestamp(change - 1, ZoneInfo(tz)).replace(tzinfo=None)
        around = {(before + timedelta(seconds=d)).hour for d in (-3600, 0, 1, 1801, 3601)}
        around |= {datetime.fromtimestamp(change + d, ZoneInfo(tz)).hour for d in (0, 3600)}
        hours = st.one_of(hours, st.sets(st.sampled_from(sorted(around)), min_size=1).map(
            lambda v: ",".join(map(str, sorted(v)))))
    days = (st.tuples(DOM, MONTH, DOW).map(" ".join) if draw(st.integers(0, 2)) == 0
            else st.just("* * *"))
    expr = draw(st.tuples(field(0, 59), hours, days).map(" ".join).filter(readable))
    first = next_after(expr, tz, min(start, LAST_TIME - DAY))
    assume(first is not None)
    assert first is not None
    longest = min(3 * YEAR, WALK_LIMIT * DAY // len(_readings(expr).minutes))
    how = draw(st.sampled_from(["across", "occurrences", "long"]))
    if how == "across" and change is not None and first < change:
        behind = change - first + draw(st.integers(-3600, 2 * DAY))
    elif how == "long":
        behind = draw(st.integers(0, longest))
    else:  # a number of occurrences on, and a little more
        last = deque(islice(occurrences(expr, ZoneInfo(tz), first),
                            draw(st.integers(0, 3000))), maxlen=1)
        behind = (last[0] - first if last else 0) + draw(st.integers(0, 7200))
    return expr, tz, first, min(first + min(max(behind, 0), longest), LAST_TIME)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(windows())
def test_counting_gives_exactly_what_walking_gives(window: tuple[str, str, int, int]) -> None:
    expr, tz, first, now = window
    assert Cron(expr, tz).span(first, now) == walked(expr, tz, first, now), window


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(windows(), st.integers(-2 * DAY, 2 * DAY))
def test_counting_from_any_second_gives_what_walking_gives(
        window: tuple[str, str, int, int], shift: int) -> None:
    expr, tz, first, now = window
    first = max(0, min(first + shift, now))  # a due time off the schedule: a changed zone
    assert Cron(expr, tz).span(first, now) == walked(expr, tz, first, now), (expr, tz, first,
                                                                              now)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp())


@pytest.mark.parametrize(("expr", "tz", "first", "now"), [
    # Berlin skips 02:00-03:00 on 2024-03-31 (01:00Z): skipped times fire at 03:00, once,
    # and 03:00 itself, if it matches, is that same occurrence
    ("30 2 * * *", "Europe/Berlin", utc(2024, 3, 29, 1, 30), utc(2024, 4, 2)),
    ("0,30 2,3 * * *", "Europe/Berlin", utc(2024, 3, 30, 1, 0), utc(2024, 4, 1)),
    ("15 2 * * *", "Europe/Berlin", utc(2024, 3, 31, 1, 0), utc(2024, 3, 31, 1, 0)),
    ("*/20 2 * * *", "Europe/Berlin", utc(2024, 3, 30, 1, 0), utc(2024, 4, 1)),  # elapsed
    # New York shows 01:00-02:00 twice on 2024-11-03 (06:00Z): a fixed time fires at its
    # first pass only, a wildcard one in both; counting from inside the second pass
    ("30 1 * * *", "America/New_York", utc(2024, 11, 2, 5, 30), utc(2024, 11, 5)),
    ("*/15 1 * * *", "America/New_York", utc(2024, 11, 2, 5, 30), utc(2024, 11, 5)),
    ("30 1 * * *", "America/New_York", utc(2024, 11, 3, 6, 10), utc(2024, 11, 3, 8)),
    ("45 1 * * *", "America/New_York", utc(2024, 11, 3, 6, 50), utc(2024, 11, 4, 7)),
    # a half-hour change (Lord Howe), two hours (Troll), a whole skipped day (Apia),
    # and an offset of whole seconds changed to UTC (Monrovia, 1972)
    ("15,45 1,2 * * *", "Australia/Lord_Howe", utc(2024, 4, 5), utc(2024, 4, 9)),
    ("0 */2 * * *", "Australia/Lord_Howe", utc(2024, 10, 4), utc(2024, 10, 8)),
    ("30 1,2,3 * * *", "Antarctica/Troll", utc(2024, 3, 29), utc(2024, 4, 2)),
    ("0 12 * * *", "Pacific/Apia", utc(2011, 12, 28), utc(2012, 1, 2)),
    ("* 0 * * *", "Africa/Monrovia", utc(1972, 1, 6), utc(1972, 1, 8)),
    ("0,45 0 * * *", "Africa/Monrovia", utc(1972, 1, 6), utc(1972, 1, 8)),
])
def test_the_dst_rule_at_its_edges_counts_as_it_walks(expr: str, tz: str, first: int,
                                                      now: int) -> None:
    assert Cron(expr, tz).span(first, now) == walked(expr, tz, first, now)


@pytest.fixture
def cron_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many occurrences cronsim has been asked for since the fixture was made: what a
    pass costs, counted instead of timed (a walk asks once per missed occurrence)."""
    import cronsim

    steps = [0]
    step = cronsim.CronSim.__next__

    def counted(self: cronsim.CronSim) -> datetime:
        steps[0] += 1
        return step(self)

    monkeypatch.setattr(cronsim.CronSim, "__next__", counted)
    return steps


def test_ten_and_twenty_years_behind_every_minute_are_counted_not_walked(
        cron_steps: list[int]) -> None:
    now = 1_800_000_000 - 1_800_000_000 % 60
    for years in (10, 20):
        for tz in ("UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"):
            first = next_after("* * * * *", tz, now - years * YEAR)
            assert first is not None
            cron_steps[0] = 0
            latest, missed, following = Cron("* * * * *", tz).span(first, now)
            assert (latest, missed, following) == (now, (now - first) // 60, now + 60)
            # a few steps per change of the zone's offset, not one per missed minute
            assert cron_steps[0] <= 3 * years + 5, (years, tz, cron_steps[0])


def test_a_timer_due_in_1970_owes_one_event_at_once(cron_steps: list[int]) -> None:
    """The device whose clock started at 1970 and was set right: one coalesced event."""
    now = 1_800_000_000
    timer = Timer("t", 60, None, "{}", "coalesce", None, None, False, 0, "* * * * *",
                  "Europe/Berlin")
    result = owed(timer, now, Policy())
    assert cron_steps[0] <= 3 * 57 + 5  # 57 years of a zone's changes, counted
    latest = now - now % 60
    assert result.events == ((latest, (latest - 60) // 60),)
    assert result.next_due == latest + 60
