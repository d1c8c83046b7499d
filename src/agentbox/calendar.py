"""Calendar schedules: cron expressions in a time zone, correct across DST.

Pure: no database, no CLI. Zones come from the standard library (zoneinfo).
Expressions are read, and matched against wall-clock readings, by cronsim
(the evaluator Healthchecks runs), never by a parser of our own; this module
applies the DST rule below to turn readings into instants. cronsim was
chosen over croniter:

- DST. On the night clocks fall back, a daily ``30 1 * * *`` fires once with
  cronsim and twice with croniter 7 (01:30 daylight time, then 01:30 standard
  time), in New York, Berlin and Lord Howe alike. Both fire a time the clocks
  skip at the end of the gap. Neither is right everywhere: cronsim's own zone
  arithmetic loses occurrences around a 30-minute change (Lord Howe), which
  is why only its zone-free calendar is used.
- Correctness. cronsim follows Debian's cron (day-of-month and day-of-week
  either may match unless one is ``*``) and refuses dates that never come
  (``0 0 30 2 *``) when the expression is read.
- Cost. cronsim is one typed module with no dependencies (about 14 ms to
  import, 15-55 µs to find a next occurrence); croniter brings python-dateutil
  (about 55 ms and 69 modules to import, 95-300 µs per next occurrence).
- Maintenance. cronsim is maintained as part of Healthchecks; croniter's
  author ended its development in December 2024 and it was taken over by the
  pallets-eco organisation.

The DST rule, Debian cron's:

- An expression whose minute and hour fields are both fixed (neither starts
  with ``*``: ``0 8 * * 1-5``, ``30 2 * * *``, ``0 9,17 * * *``) names local
  wall-clock times, and each fires once. A time the clocks skip fires at the
  first minute after the gap (02:30 on a night that jumps from 02:00 to 03:00
  fires at 03:00; several skipped times fire there once). A time the clocks
  show twice fires at its first pass only.
- An expression with ``*`` in its minute or hour field (``*/15 * * * *``,
  ``0 * * * *``) follows elapsed time: it fires at every instant whose local
  reading matches, so an hourly timer fires in both passes of a repeated hour
  and not in a skipped one, and a quarter-hourly one never falls silent.

A time written without a zone (``--at 2026-03-08T02:30``) is read in the zone
of :func:`local_zone`; one the clocks skip is refused, one they show twice is
its first pass (``fold=0``), as for cron.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from calendar import isleap
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentbox.clock import LAST_TIME, check_time
from agentbox.errors import BadInput, UsageError

MAX_EXPRESSION = 200  # characters; a longer cron line is a mistake, not a schedule
_EXAMPLE = "MIN HOUR DOM MON DOW, e.g. '0 8 * * 1-5'"
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``); BadInput if unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadInput(f"unknown time zone {name!r} (use an IANA name such as "
                       "Europe/Berlin or UTC)") from None


def _named(name: str, where: str) -> ZoneInfo:
    """A zone named by the environment or the config: a bad name is a usage error there."""
    try:
        return zone(name)
    except BadInput as exc:
        raise UsageError(f"{where}: {exc}") from None


def _from_file(path: Path, where: str) -> ZoneInfo:
    """The zone in a TZif file, named by its place under a ``zoneinfo`` folder if it has one."""
    try:
        resolved = path.resolve()
        parts = resolved.parts
        if "zoneinfo" in parts:
            key = "/".join(parts[len(parts) - parts[::-1].index("zoneinfo"):])
            try:
                return zone(key)
            except BadInput:
                pass
        with open(resolved, "rb") as fh:
            return ZoneInfo.from_file(fh)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: cannot read a time zone from {path}: {exc}") from None


def local_zone(configured: str | None = None, environ: Mapping[str, str] = os.environ,
               localtime: Path = Path("/etc/localtime")) -> ZoneInfo:
    """The zone a time without one is read in, and a cron timer's default zone.

    Config ``timezone``, else ``TZ`` (a zone name, ``:NAME``, or a file path;
    empty counts as unset), else the system's ``/etc/localtime``, else UTC.
    A zone read from a file outside any ``zoneinfo`` folder has no name
    (``key`` is None): it reads times, but a timer cannot store it.
    """
    if configured:
        return _named(configured, "config timezone")
    spelled = environ.get("TZ", "")
    if spelled:
        name = spelled.removeprefix(":")
        if name.startswith("/"):
            return _from_file(Path(name), f"TZ={spelled!r}")
        return _named(name, f"TZ={spelled!r}")
    if localtime.exists():
        return _from_file(localtime, str(localtime))
    return zone("UTC")


def _instants(wall: datetime, tz: ZoneInfo) -> tuple[int, int] | None:
    """The instants the clock in ``tz`` reads ``wall``: (first pass, second pass), the
    same twice unless the clocks show it twice; None if they skip it.

    ``fold=0`` reads a wall time with the offset in force before a change and
    ``fold=1`` with the one after (PEP 495): when the first reading is the
    earlier instant the clocks showed it twice, when it is the later one they
    jumped over it.
    """
    local = (wall - _EPOCH) // _SECOND
    first = local - _seconds(tz.utcoffset(wall.replace(fold=0)))
    second = local - _seconds(tz.utcoffset(wall.replace(fold=1)))
    return None if first > second else (first, second)


def _seconds(offset: timedelta | None) -> int:
    return 0 if offset is None else offset // _SECOND


def from_local(wall: datetime, tz: ZoneInfo) -> int:
    """Unix seconds of the naive wall-clock time ``wall`` in ``tz``.

    A time the clocks skip is refused (BadInput); a time they show twice is
    its first pass (``fold=0``), the rule cron timers follow too.
    """
    where = tz.key or "the local time zone"
    found = _instants(wall, tz)
    if found is None:
        raise BadInput(f"{wall.isoformat()} does not exist in {where}: the clocks skip it "
                       "(daylight saving time); give another time or a UTC offset")
    return check_time(found[0], f"{wall.isoformat()} in {where} is")


def check_cron(expr: str) -> str:
    """``expr`` with its five fields single-spaced; BadInput if cron cannot read it."""
    fields = expr.split()
    if len(expr) > MAX_EXPRESSION or not expr.isascii() or len(fields) != 5:
        raise BadInput(f"cron expression {expr!r}: give five fields, {_EXAMPLE}")
    spelled = " ".join(fields)
    from cronsim import CronSim, CronSimError

    try:
        CronSim(spelled, datetime(2000, 1, 1))
    except CronSimError as exc:  # "Bad minute", "Bad day-of-month", ...
        raise BadInput(f"cron expression {expr!r}: {str(exc).lower()} field ({_EXAMPLE})") from None
    return spelled


def _names_wall_clock(expr: str) -> bool:
    """Whether ``expr`` names wall-clock times (minute and hour both fixed) rather than
    following elapsed time: which half of the DST rule it follows."""
    minute, hour = expr.split()[:2]
    return not (minute.startswith("*") or hour.startswith("*"))


def _wall_clock(walls: Iterator[datetime], tz: ZoneInfo) -> Iterator[int]:
    """Fixed-time expressions: each matching reading once, a skipped one after the gap."""
    last = None
    for wall in walls:
        fires = wall
        while (found := _instants(fires, tz)) is None:
            fires += _MINUTE
        if last is None or found[0] > last:
            last = found[0]
            yield last


def _elapsed(walls: Iterator[datetime], tz: ZoneInfo) -> Iterator[int]:
    """Wildcard expressions: every instant whose reading matches, in order."""
    second_passes: deque[int] = deque()  # of readings already met, not yet reached
    for wall in walls:
        found = _instants(wall, tz)
        if found is None:
            continue
        while second_passes and second_passes[0] < found[0]:
            yield second_passes.popleft()
        yield found[0]
        if found[1] != found[0]:
            second_passes.append(found[1])
    yield from second_passes


def occurrences(expr: str, tz: ZoneInfo, t: int) -> Iterator[int]:
    """The occurrences of a checked ``expr`` in ``tz`` strictly after ``t``, in order.

    UTC seconds, each once, up to the year 9999 (and at most 50 years apart,
    cronsim's horizon). cronsim finds the matching wall-clock readings, in a
    zone-free calendar; the DST rule of the module docstring turns them into
    instants. (cronsim's own zone handling is not used: with a 30-minute
    change, as on Lord Howe, it skips ``0 */2 * * *`` from 00:00 to 04:00.)

    Readings are walked from ``t``'s own, or, when ``t`` is in the first pass
    of a repeated hour, from as far back as the clocks will go, so the second
    pass is met; instants at or before ``t`` met on the way are passed over.
    """
    from cronsim import CronSim

    walk = _wall_clock if _names_wall_clock(expr) else _elapsed
    try:
        reading = datetime.fromtimestamp(t, tz).replace(tzinfo=None)
        passes = _instants(reading, tz)
        if passes is not None and passes[0] == t:
            reading -= timedelta(seconds=passes[1] - passes[0])
        for at in walk(CronSim(expr, reading), tz):
            if at > LAST_TIME:
                return
            if at > t:
                yield at
    except (OverflowError, ValueError):  # a calendar that runs past the year 9999
        return


def next_after(expr: str, tz: str, t: int) -> int | None:
    """The first occurrence of ``expr`` in zone ``tz`` strictly after ``t``; None if none."""
    return next(occurrences(expr, zone(tz), t), None)


# -- counting occurrences without walking them -------------------------------------
#
# A timer far behind (a device whose clock started at 1970) owes millions of
# occurrences of ``* * * * *``; walking them one by one held the write lock for
# minutes. Cron.span counts them instead. Between two changes of the zone's UTC
# offset every instant has one wall-clock reading, so the occurrences there are
# the matching readings, counted by calendar arithmetic (_Readings); at each
# change the DST rule is applied to the readings it skips or repeats. The
# latest occurrence is found with cronsim's reverse iteration.

_DAY = 86_400
_EPOCH_DAY = date(1970, 1, 1).toordinal()
# One past the last reading a calendar holds (9999-12-31T23:59), in local seconds:
# seconds since 1970-01-01T00:00 on the wall clock, as a naive datetime reads.
_END_OF_READINGS = (date.max.toordinal() - _EPOCH_DAY) * _DAY + _DAY - 59


def _naive(local: int) -> datetime:
    return _EPOCH + timedelta(seconds=local)


class _Readings:
    """How many wall-clock readings (minutes, second 0) a checked expression matches.

    Counted, not walked: the matching minutes of a day times the matching days,
    which are summed per kind of year (leap or not, and the weekday of 1 January:
    fourteen kinds) and per 400-year cycle, after which the calendar repeats
    itself, weekdays included. Which days and minutes match is cronsim's word: the
    field sets it read and its own day test (``L``, ``LW``, ``5L``, ``#``, and
    Debian's either-day rule), so no second reading of the expression exists.
    """

    def __init__(self, expr: str) -> None:
        from cronsim import CronSim

        sim = CronSim(expr, datetime(2000, 1, 1))
        self._sim = sim
        self.minutes = sorted(h * 60 + m for h in sim.hours for m in sim.minutes)
        self._kinds: dict[tuple[bool, int], list[int]] = {}
        self._cycle = [0]  # matching days before each year of a cycle; [400]: in all
        for year in range(1, 401):
            self._cycle.append(self._cycle[-1] + self._year(year)[-1])

    def matches(self, day: date) -> bool:
        return day.month in self._sim.months and self._sim.match_day(day)

    def _year(self, year: int) -> list[int]:
        """Matching days of ``year`` before each of its days, then in all."""
        start = date(year, 1, 1)
        kind = (isleap(year), start.weekday())
        if kind not in self._kinds:
            counts = [0]
            for n in range(366 if kind[0] else 365):
                counts.append(counts[-1] + self.matches(date.fromordinal(start.toordinal() + n)))
            self._kinds[kind] = counts
        return self._kinds[kind]

    def _days_before(self, ordinal: int) -> int:
        """Matching days from 0001-01-01 up to, not including, the day ``ordinal``."""
        day = date.fromordinal(ordinal)
        cycles, year = divmod(day.year - 1, 400)
        into = ordinal - date(day.year, 1, 1).toordinal()
        return cycles * self._cycle[400] + self._cycle[year] + self._year(day.year)[into]

    def before(self, local: int) -> int:
        """Matching readings earlier than the local second ``local``."""
        days, second = divmod(min(local, _END_OF_READINGS), _DAY)
        ordinal = _EPOCH_DAY + days
        count = self._days_before(ordinal) * len(self.minutes)
        if self.matches(date.fromordinal(ordinal)):
            count += bisect_left(self.minutes, -(-second // 60))
        return count

    def between(self, lo: int, hi: int) -> int:
        """Matching readings at local seconds in [lo, hi)."""
        return self.before(hi) - self.before(lo) if hi > lo else 0


@lru_cache(maxsize=64)
def _readings(expr: str) -> _Readings:
    return _Readings(expr)


def _offset(tz: ZoneInfo, t: int) -> int:
    """The zone's UTC offset at the instant ``t``, in seconds."""
    return _seconds(datetime.fromtimestamp(t, tz).utcoffset())


def _reachable(tz: ZoneInfo) -> int:
    """The last instant whose reading in ``tz`` a calendar still holds (the year 9999)."""
    return LAST_TIME - max(0, _offset(tz, LAST_TIME - 2 * _DAY))


class _Stretch(NamedTuple):
    """Instants [start, end) under one UTC ``offset``, entered from ``before`` (the
    offset until ``start``; the same when no change begins it)."""

    start: int
    end: int
    offset: int
    before: int


def _stretches(tz: ZoneInfo, start: int, last: int) -> list[_Stretch]:
    """The instants from ``start`` to ``last`` cut where the zone's offset changes,
    oldest first.

    The offset is sampled a day apart and each change narrowed to its second, so
    two changes less than a day apart would be taken for none; tzdata's closest
    are four days apart.
    """
    found: list[_Stretch] = []
    at, offset = start, _offset(tz, start)
    begun, before = start, offset
    while at < last:
        probe = min(at + _DAY, last)
        if _offset(tz, probe) == offset:
            at = probe
            continue
        lo, hi = at, probe  # the offset at lo is the old one, at hi another
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _offset(tz, mid) == offset else (lo, mid)
        found.append(_Stretch(begun, hi, offset, before))
        begun, before, at, offset = hi, offset, hi, _offset(tz, hi)
    found.append(_Stretch(begun, last + 1, offset, before))
    return found


def _gap_fire(stretch: _Stretch, readings: _Readings) -> int | None:
    """Where a wall-clock expression fires the times a gap skipped: the first whole
    minute after the gap that opens ``stretch``, unless it fires there anyway (or the
    gap skipped no matching time, or opens no stretch)."""
    skipped = stretch.start + stretch.before, stretch.start + stretch.offset
    if skipped[0] >= skipped[1] or not readings.between(*skipped):
        return None
    fires = -(-skipped[1] // 60) * 60
    return None if readings.between(fires, fires + 1) else fires - stretch.offset


def _first_passes(stretch: _Stretch, wall_clock: bool) -> int:
    """Local seconds from which the readings of ``stretch`` are occurrences: under a
    wall-clock expression the readings a fold repeats already fired at their first
    pass, before the change that opens it."""
    start = stretch.start + stretch.offset
    return max(start, stretch.start + stretch.before) if wall_clock else start


@dataclass(frozen=True)
class Cron:
    """A cron timer's schedule (:class:`agentbox.rules.timers.Schedule`)."""

    expr: str
    tz: str

    def after(self, at: int) -> int | None:
        return next_after(self.expr, self.tz, at)

    def span(self, first: int, now: int) -> tuple[int, int, int | None]:
        """The latest occurrence after ``first`` up to ``now`` (else ``first``), how many
        there are, and the next one: what walking :func:`occurrences` would give, in
        time that grows with the days in between (one look at the zone's offset a
        day: twenty years take milliseconds), not with the occurrences.

        Occurrences at ``first`` or before are not counted, even when a fold
        that began before ``first`` repeats their readings after it, so the
        stretches start two days early: no fold is longer.
        """
        tz = zone(self.tz)
        last = min(now, _reachable(tz))
        if last <= first:
            return first, 0, self.after(first)
        readings = _readings(self.expr)
        wall_clock = _names_wall_clock(self.expr)
        missed, latest = 0, first
        for stretch in _stretches(tz, first - 2 * _DAY, last):
            lo, hi = max(stretch.start, first + 1), stretch.end
            if lo >= hi:
                continue
            fire = _gap_fire(stretch, readings) if wall_clock else None
            if fire is not None and lo <= fire < hi:
                missed, latest = missed + 1, fire
            shown = max(lo + stretch.offset, _first_passes(stretch, wall_clock))
            count = readings.between(shown, hi + stretch.offset)
            if count:
                missed += count
                latest = self._latest_reading(hi + stretch.offset) - stretch.offset
        return latest, missed, self.after(latest)

    def _latest_reading(self, below: int) -> int:
        """The latest matching reading before the local second ``below``, where one is
        known to be in the stretch: a cron expression's matches are never 50 years
        apart (cronsim's horizon), so reverse iteration always finds it."""
        from cronsim import CronSim

        found = next(CronSim(self.expr, _naive(min(below, _END_OF_READINGS)), reverse=True))
        return (found - _EPOCH) // _SECOND


def _day_start(day: date, tz: tzinfo) -> int:
    """The first instant whose wall clock in ``tz`` reads ``day``: its midnight, or, where
    the clocks skip midnight, the moment they jump past it."""
    wall = datetime(day.year, day.month, day.day)
    local = (wall - _EPOCH) // _SECOND
    first = local - _seconds(tz.utcoffset(wall.replace(fold=0)))
    second = local - _seconds(tz.utcoffset(wall.replace(fold=1)))
    if first <= second:  # midnight is shown (once or twice): its first pass
        return first
    early, late = second, first
    while early < late:  # skipped: the first instant of the day lies between
        middle = (early + late) // 2
        if datetime.fromtimestamp(middle, tz).date() >= day:
            late = middle
        else:
            early = middle + 1
    return late


def local_day(t: int, tz: tzinfo) -> tuple[int, int]:
    """The local day in ``tz`` that holds the instant ``t``: (its first second, the first
    second of the next day), DST-correct (a day may last 23 or 25 hours). The last day
    of 9999 ends past :data:`~agentbox.clock.LAST_TIME`."""
    today = datetime.fromtimestamp(t, tz).date()
    start = _day_start(today, tz)
    if today == date.max:
        return start, LAST_TIME + 1
    end = _day_start(today + timedelta(days=1), tz)
    if end <= t:  # the clocks went back across midnight: today came round again
        low, high = t, t + 3600
        while datetime.fromtimestamp(high, tz).date() <= today:
            low, high = high, high + 3600
        while high - low > 1:
            middle = (low + high) // 2
            if datetime.fromtimestamp(middle, tz).date() > today:
                high = middle
            else:
                low = middle
        end = high
    return start, end
