"""Quiet hours and daily caps of a channel, read on the wall clock of the inbox's zone.

Quiet hours (``"22:00-07:00"``) are a window of local minutes, wrapping past
midnight when it starts later than it ends: an instant is quiet when its
local reading (hour and minute) falls in the window, whatever the date. So a
night the clocks fall back may be quiet twice over the repeated hour, and a
window the clocks jump into or out of starts or ends at the jump. Pure: the
zone is an argument, the readings come from :mod:`zoneinfo`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from typing import NamedTuple

from agentbox.errors import BadInput

_WINDOW = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)", re.ASCII)
_EPOCH = datetime(1970, 1, 1)
LOOKS = 8  # offset changes crossed while looking for a window's end; a day has at most two


class Window(NamedTuple):
    """Quiet from ``start`` up to (not including) ``end``, in minutes after local midnight."""

    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.start // 60:02}:{self.start % 60:02}-{self.end // 60:02}:{self.end % 60:02}"


def parse_window(text: object) -> Window:
    """``"HH:MM-HH:MM"`` as a :class:`Window`; BadInput for anything else or an empty one."""
    found = _WINDOW.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        raise BadInput(f"quiet hours are written HH:MM-HH:MM, e.g. 22:00-07:00, not {text!r}")
    h1, m1, h2, m2 = (int(g) for g in found.groups())
    window = Window(h1 * 60 + m1, h2 * 60 + m2)
    if window.start == window.end:
        raise BadInput(f"quiet hours {text!r} start and end at the same time")
    return window


def _minute(t: int, tz: tzinfo) -> int:
    local = datetime.fromtimestamp(t, tz)
    return local.hour * 60 + local.minute


def contains(window: Window, minute: int) -> bool:
    if window.start < window.end:
        return window.start <= minute < window.end
    return minute >= window.start or minute < window.end


def quiet(t: int, tz: tzinfo, window: Window) -> bool:
    """Whether the instant ``t`` falls in the quiet hours."""
    return contains(window, _minute(t, tz))


def _offset(t: int, tz: tzinfo) -> timedelta | None:
    return datetime.fromtimestamp(t, tz).utcoffset()


def _changed(since: int, tz: tzinfo) -> Callable[[int], bool]:
    """Whether the offset at an instant differs from the one at ``since``."""
    before = _offset(since, tz)
    return lambda t: _offset(t, tz) != before


def _first(low: int, high: int, passed: Callable[[int], bool]) -> int:
    """The first instant in (low, high] for which ``passed`` holds (it holds at high)."""
    while high - low > 1:
        middle = (low + high) // 2
        if passed(middle):
            high = middle
        else:
            low = middle
    return high


def _reading(t: int, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp(t, tz).replace(tzinfo=None)


def _reading_reaches(t: int, tz: tzinfo, wall: datetime) -> int:
    """The first instant after ``t`` whose local reading is ``wall`` (its first pass
    after ``t``), or, where the clocks skip ``wall``, the moment they jump past it."""
    local = (wall - _EPOCH) // timedelta(seconds=1)
    passes = sorted({local - _seconds(tz.utcoffset(wall.replace(fold=fold)))
                     for fold in (0, 1)})
    for candidate in passes:
        if candidate > t and _reading(candidate, tz) == wall:
            return candidate
    low = max(passes[0], t)  # skipped: the change lies between the two readings
    return _first(low, max(passes[-1], low + 1), _changed(low, tz))


def _seconds(offset: timedelta | None) -> int:
    return 0 if offset is None else offset // timedelta(seconds=1)


def quiet_until(now: int, tz: tzinfo, window: Window) -> int | None:
    """When the quiet hours holding ``now`` end: the first instant after ``now`` whose
    local reading is outside the window; None when ``now`` is not quiet.

    The end is the window's end on the wall clock, unless an offset change on the
    way moves the reading out of the window first (a jump back to before its
    start); a skipped end time ends it at the jump.
    """
    if not quiet(now, tz, window):
        return None
    t = now
    for _ in range(LOOKS):
        local = datetime.fromtimestamp(t, tz).replace(tzinfo=None)
        end = local.replace(hour=window.end // 60, minute=window.end % 60, second=0)
        if end <= local:
            end += timedelta(days=1)
        ends = _reading_reaches(t, tz, end)
        before = _offset(t, tz)
        if _offset(ends, tz) == before:
            return ends
        change = _first(t, ends, _changed(t, tz))
        if not quiet(change, tz, window):
            return change
        t = change
    return t


class Limits(NamedTuple):
    """What holds a channel's non-urgent messages besides the gap, as they stand now."""

    quiet_until: int | None = None   # in quiet hours until then; None: not quiet now
    day: tuple[int, int] | None = None  # the local day holding now (with a cap)
    max_per_day: int | None = None
    urgent_in_quiet_hours: bool = True  # an urgent message goes out in quiet hours too


def limits(now: int, tz: tzinfo, window: Window | None, max_per_day: int | None,
           urgent_in_quiet_hours: bool = True) -> Limits:
    """A channel's :class:`Limits` at ``now``."""
    from agentbox.calendar import local_day

    return Limits(None if window is None else quiet_until(now, tz, window),
                  None if max_per_day is None else local_day(now, tz), max_per_day,
                  urgent_in_quiet_hours)
