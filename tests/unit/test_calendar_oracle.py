"""Cron occurrences against a brute-force oracle, over expressions, zones and clocks.

The oracle knows nothing of cronsim: hypothesis draws each field as a set of
values and writes it as cron text; the oracle steps minute by minute through
a window, matches the sets itself and applies the documented DST rule:

- minute and hour both fixed: step through local wall-clock minutes; a
  matching time fires at its first pass (fold=0), or, if the clocks skip it,
  at the first minute after the gap; a time reached twice fires once;
- a ``*`` in minute or hour: step through real minutes; fire wherever the
  local reading matches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentbox.calendar import check_cron, occurrences
from agentbox.rules.policy import Policy
from agentbox.rules.timers import Timer, owed
from support.zones import ALL_ZONES, ODD_ZONES, changes

MINUTE = timedelta(minutes=1)
DAY = 86_400
LONGEST = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # days, by month
NAMES = {"month": ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV",
                   "DEC"], "dow": ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]}


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]

    @property
    def star(self) -> bool:
        return self.text.startswith("*")


@dataclass(frozen=True)
class Expr:
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field

    @property
    def text(self) -> str:
        return " ".join(f.text for f in (self.minute, self.hour, self.dom, self.month, self.dow))

    @property
    def wall_clock(self) -> bool:
        return not (self.minute.star or self.hour.star)

    def matches(self, t: datetime) -> bool:
        if (t.minute not in self.minute.values or t.hour not in self.hour.values
                or t.month not in self.month.values):
            return False
        dom = t.day in self.dom.values
        dow = t.isoweekday() % 7 in self.dow.values
        # Vixie cron: a '*' in either day field means both must match, else either may
        return (dom and dow) if (self.dom.star or self.dow.star) else (dom or dow)


@st.composite
def fields(draw: st.DrawFn, lo: int, hi: int, kind: str = "") -> Field:
    def spell(n: int) -> str:
        names = NAMES.get(kind)
        if names and draw(st.booleans()):
            return names[n - lo]
        if kind == "dow" and n == 0 and draw(st.booleans()):
            return "7"  # Sunday again
        return str(n)

    form = draw(st.sampled_from(["*", "*/n", "n", "a-b", "a-b/n", "list"]))
    if form == "*":
        return Field("*", frozenset(range(lo, hi + 1)))
    if form == "*/n":
        step = draw(st.integers(2, max(2, (hi - lo) // 2)))
        return Field(f"*/{step}", frozenset(range(lo, hi + 1, step)))
    if form == "n":
        n = draw(st.integers(lo, hi))
        return Field(spell(n), frozenset({n}))
    a = draw(st.integers(lo, hi - 1))
    b = draw(st.integers(a + 1, hi))
    if form == "a-b":
        return Field(f"{spell(a)}-{spell(b)}" if kind != "dow" else f"{a}-{b}",
                     frozenset(range(a, b + 1)))
    if form == "a-b/n":
        step = draw(st.integers(2, 5))
        return Field(f"{a}-{b}/{step}", frozenset(range(a, b + 1, step)))
    chosen = sorted(draw(st.sets(st.integers(lo, hi), min_size=2, max_size=6)))
    return Field(",".join(spell(n) for n in chosen), frozenset(chosen))


def listed(values: set[int]) -> Field:
    return Field(",".join(map(str, sorted(values))), frozenset(values))


def every(lo: int, hi: int) -> Field:
    return Field("*", frozenset(range(lo, hi + 1)))


# Seconds from a change: right at it, within its hours, or a day away.
NEAR = st.one_of(st.sampled_from([-60, -1, 0, 1, 60]), st.integers(-2 * 3600, 2 * 3600),
                 st.integers(-DAY, DAY))


@dataclass(frozen=True)
class Case:
    expr: Expr
    zone: str
    start: int  # a window of four days
    middle: int  # usually close to one of the zone's changes
    end: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """An expression and a window, usually around a change of the zone's offset and
    with an expression that fires in the hours the clocks read around it."""
    name = draw(st.sampled_from(ODD_ZONES) if draw(st.integers(0, 3))
                else st.sampled_from(ALL_ZONES))
    year = draw(st.integers(1995, 2037))
    near = changes(name, year)
    hours = set(range(0, 5))  # clocks change near midnight and in the small hours
    if near and draw(st.integers(0, 5)):
        change = draw(st.sampled_from(near))
        middle = change + draw(NEAR)
        hours = {datetime.fromtimestamp(change + d, ZoneInfo(name)).hour
                 for d in (-3600, -1, 0, 3600)}
    else:
        middle = int(datetime(year, 1, 1, tzinfo=UTC).timestamp()) + draw(
            st.integers(0, 365 * DAY))
    minute = draw(st.one_of(fields(0, 59), st.sampled_from(["*", "*/2", "*/15"]).map(
        lambda text: Field(text, frozenset(range(0, 60, int(text[2:] or 1))))),
        st.sets(st.integers(0, 59), min_size=4, max_size=30).map(listed)))
    around = st.sets(st.sampled_from(sorted(hours)), min_size=1).map(listed)
    hour = draw(around if draw(st.integers(0, 2)) else fields(0, 23))
    # mostly every day, so that the days around a change are named
    dom, month, dow = (draw(st.just(every(lo, hi)) if draw(st.integers(0, 2))
                            else fields(lo, hi, kind))
                       for lo, hi, kind in ((1, 31, ""), (1, 12, "month"), (0, 6, "dow")))
    # a day that no month named has (30 February) is refused when read, not a schedule
    longest = max(LONGEST[m - 1] for m in month.values)
    assume(not (dom.star or dow.star) or min(dom.values) <= longest)
    return Case(Expr(minute, hour, dom, month, dow), name, middle - 2 * DAY, middle,
                middle + 2 * DAY)


def oracle(expr: Expr, name: str, start: int, end: int) -> list[int]:
    """Every occurrence in [start, end], stepping minute by minute."""
    tz = ZoneInfo(name)
    found: set[int] = set()
    if expr.wall_clock:
        def exists(wall: datetime) -> bool:
            aware = wall.replace(tzinfo=tz)
            return aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall

        wall = datetime.fromtimestamp(start, tz).replace(tzinfo=None, second=0) - 2 * timedelta(
            days=1)
        last = datetime.fromtimestamp(end, tz).replace(tzinfo=None) + timedelta(days=1)
        while wall <= last:
            if expr.matches(wall):
                fires = wall
                while not exists(fires):
                    fires += MINUTE
                found.add(int(fires.replace(tzinfo=tz, fold=0).timestamp()))
            wall += MINUTE
    else:
        for t in range(start - start % 60, end + 1, 60):
            if expr.matches(datetime.fromtimestamp(t, tz)):
                found.add(t)
    return sorted(t for t in found if start <= t <= end)


PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(cases(), NEAR)
def test_occurrences_are_exactly_the_oracles(case: Case, offset: int) -> None:
    expr, name, end = case.expr, case.zone, case.end
    t = case.middle + offset  # often from inside a change: a gap, a repeated hour
    expected = oracle(expr, name, t + 1, end)
    got = []
    for at in occurrences(check_cron(expr.text), ZoneInfo(name), t):
        if at > end:
            break
        got.append(at)
    assert got == expected, (expr.text, name, [datetime.fromtimestamp(x, ZoneInfo(name))
                                               for x in sorted(set(got) ^ set(expected))])


@PROPERTY
@given(cases(), st.sampled_from(["coalesce", "each"]), st.integers(1, 6), st.data())
def test_what_a_due_timer_owes_matches_the_oracle(case: Case, catch_up: str, limit: int,
                                                  data: st.DataObject) -> None:
    expr, name, start, end = case.expr, case.zone, case.start, case.end
    every = oracle(expr, name, start, end)
    assume(every)
    due = data.draw(st.sampled_from(every[: max(1, len(every) // 2)]))
    later_ones = [t for t in every if t >= due]
    # back on an occurrence exactly, or at any time up to the window's end
    now = data.draw(st.one_of(st.sampled_from(later_ones), st.integers(due, end)))
    due_ones = [t for t in every if due <= t <= now]
    timer = Timer("t", due, None, "{}", catch_up, None, None, False, 0, check_cron(expr.text),
                  name)
    result = owed(timer, now, Policy(catch_up_limit=limit))
    events = list(result.events)
    # every event is an occurrence, none twice, and each one skipped is counted
    assert [t for t, _ in events] == sorted({t for t, _ in events})
    assert {t for t, _ in events} <= set(due_ones)
    assert sum(1 + skipped for _, skipped in events) == len(due_ones)
    assert events[-1][0] == due_ones[-1]
    if catch_up == "coalesce":
        assert events == [(due_ones[-1], len(due_ones) - 1)]
    elif len(due_ones) <= limit:
        assert events == [(t, 0) for t in due_ones]
    else:
        assert events == [(t, 0) for t in due_ones[: limit - 1]] + [
            (due_ones[-1], len(due_ones) - limit)]
    later = [t for t in every if t > now]
    if later:
        assert result.next_due == later[0]
    else:
        assert result.next_due is None or result.next_due > end
