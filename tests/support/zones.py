"""Time zones for the calendar tests: ones with odd changes, and where a zone's changes are."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

DAY = 86_400
# Zones with odd changes: 30- and 45-minute offsets and shifts, changes at midnight,
# a two-hour shift (Troll), a whole skipped day (Apia, 2011-12-30), negative DST (Dublin),
# an offset of whole seconds (Monrovia until 1972), none at all (Kiritimati, UTC).
ODD_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham",
             "America/Havana", "Asia/Gaza", "Antarctica/Troll", "Pacific/Apia", "Europe/Dublin",
             "America/Santiago", "Asia/Tehran", "Africa/Casablanca", "America/St_Johns",
             "Africa/Monrovia", "Pacific/Kiritimati", "UTC"]
ALL_ZONES = sorted(available_timezones())


@functools.cache
def changes(name: str, year: int) -> tuple[int, ...]:
    """The instants in ``year`` at which ``name``'s UTC offset changes (hourly probes)."""
    tz = ZoneInfo(name)

    def offset(t: int) -> timedelta | None:
        return datetime.fromtimestamp(t, tz).utcoffset()

    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    found = []
    for t in range(start, start + 366 * DAY, 3600):
        if offset(t) != offset(t + 3600):
            lo, hi = t, t + 3600  # offset(lo) differs from offset(hi): narrow to the second
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if offset(mid) == offset(lo) else (lo, mid)
            found.append(hi)
    return tuple(found)
