"""Durations (``90s``, ``15m``, ``4h``, ``1d``, ``1h30m``) and points in time."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from agentbox.errors import BadInput

if TYPE_CHECKING:
    from datetime import datetime

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+)([smhdw])", re.ASCII)
_WHOLE = re.compile(r"(?:\d+[smhdw])+", re.ASCII)
_INTEGER = re.compile(r"-?\d+", re.ASCII)
# A century: beyond it is a typo, not a plan. It also keeps every sum of a time
# (at most the end of 9999) and a duration far inside a 64-bit integer, so such
# a sum is only ever refused for passing the year 9999 (clock.check_time).
MAX_SECONDS = 100 * 365 * 86400


def parse_duration(text: str | int) -> int:
    """Seconds in a duration; a bare integer counts as seconds. Must be positive."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise BadInput(f"not a duration: {text!r} (use e.g. 90s, 15m, 4h, 1d)")
    if isinstance(text, int):
        seconds = text
    else:
        spelled = text.strip().lower()
        if spelled.isascii() and spelled.isdigit():
            seconds = int(spelled)
        elif _WHOLE.fullmatch(spelled):
            seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(spelled))
        else:
            raise BadInput(f"not a duration: {text!r} (use e.g. 90s, 15m, 4h, 1d)")
    return check_seconds(seconds, text)


def check_seconds(seconds: int, spelled: object) -> int:
    """``seconds`` of a duration spelled ``spelled``: positive and at most a century."""
    if seconds <= 0:
        raise BadInput(f"a duration must be positive, not {spelled!r}")
    if seconds > MAX_SECONDS:
        raise BadInput(f"duration {spelled!r} is longer than a century")
    return seconds


def parse_time(text: str, now: int) -> int | datetime:
    """A point in time: Unix seconds, ISO 8601, ``now``, or ``+DURATION`` from now.

    An ISO 8601 time without a zone is a wall-clock time: it comes back as a
    naive datetime for the caller to place in a zone (``calendar.from_local``,
    which refuses a time the zone skips); every other form as Unix seconds,
    which the caller checks against the years 1970 to 9999 (``clock.check_time``):
    a time that is spelled right but out of range is bad input, not a typo.
    """
    spelled = text.strip()
    if spelled == "now":
        return now
    if spelled.startswith("+"):
        return now + parse_duration(spelled[1:])
    try:
        if _INTEGER.fullmatch(spelled):
            moment = int(spelled)
        else:
            from datetime import datetime  # here: settings and ingest read no dates

            parsed = datetime.fromisoformat(spelled)
            if parsed.tzinfo is None:
                return parsed
            moment = int(parsed.timestamp())
    except ValueError:
        raise BadInput(f"not a time: {text!r} (use Unix seconds, ISO 8601, "
                       "'now' or '+DURATION')") from None
    return moment


def format_duration(seconds: int) -> str:
    """The shortest exact spelling, e.g. 5400 -> '1h30m'."""
    if seconds <= 0:
        return f"{seconds}s"
    parts = []
    for unit in ("d", "h", "m", "s"):
        n, seconds = divmod(seconds, _UNITS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)
