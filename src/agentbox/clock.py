"""The one clock of a process, and the range every time keeps.

``AGENTBOX_NOW`` pins the clock, so tests never sleep. Every time agentbox
keeps (the clock, a timer's due time, a deadline, a retry) is Unix seconds
within the years 1970 to 9999 (:func:`check_time`): past them a date cannot be
shown, and a sum could pass what a 64-bit column holds, so that a row written
under a far-future clock would fail every later command that read it.
"""

from __future__ import annotations

import os
import time

from agentbox.errors import BadInput

FIRST_TIME = 0  # 1970-01-01T00:00:00Z
LAST_TIME = 253_402_300_799  # 9999-12-31T23:59:59Z


def within(t: int) -> bool:
    """Whether ``t`` is a time agentbox may keep (see :func:`check_time`)."""
    return FIRST_TIME <= t <= LAST_TIME


def check_time(t: int, what: str) -> int:
    """``t``, if it is within the years 1970 to 9999; else BadInput, nothing stored.

    ``what`` leads the message and ``t`` follows it: "approval 'a1' would
    expire at". Every time a rule computes from the clock passes through here.
    """
    if not within(t):
        raise BadInput(f"{what} {t}, outside the years 1970 to 9999 (Unix seconds "
                       f"{FIRST_TIME} to {LAST_TIME})")
    return t


def now() -> int:
    pinned = os.environ.get("AGENTBOX_NOW")
    if not pinned:
        return check_time(int(time.time()), "the system clock reads")
    # Plain ASCII digits only: int() would also take " 5", "-5", "+5", "5_000" and
    # other scripts' digits. Too many digits are refused before any conversion.
    digits = pinned.lstrip("0")
    if (pinned.isascii() and pinned.isdigit() and len(digits) <= len(str(LAST_TIME))
            and within(int(pinned))):
        return int(pinned)
    raise BadInput(f"AGENTBOX_NOW must be Unix seconds in plain decimal digits, from "
                   f"{FIRST_TIME} (1970) to {LAST_TIME} (9999-12-31T23:59:59Z), not "
                   f"{pinned[:40]!r}")


def pinned() -> bool:
    return bool(os.environ.get("AGENTBOX_NOW"))


def seconds_until(at: int) -> float:
    """Seconds from now until the Unix second ``at`` begins (negative once it has).

    On the real clock this counts fractions, so a watcher wakes when a timer
    falls due rather than up to a second later; a pinned clock never moves.
    """
    pinned_at = os.environ.get("AGENTBOX_NOW")
    return at - (now() if pinned_at else time.time())
