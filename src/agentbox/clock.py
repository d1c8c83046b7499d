"""The one clock of a process: ``AGENTBOX_NOW`` pins it, so tests never sleep."""

from __future__ import annotations

import os
import time

from agentbox.errors import UsageError


def now() -> int:
    pinned = os.environ.get("AGENTBOX_NOW")
    if pinned:
        try:
            return int(pinned)
        except ValueError:
            raise UsageError(f"AGENTBOX_NOW must be integer Unix seconds, not {pinned!r}") from None
    return int(time.time())


def pinned() -> bool:
    return bool(os.environ.get("AGENTBOX_NOW"))


def seconds_until(at: int) -> float:
    """Seconds from now until the Unix second ``at`` begins (negative once it has).

    On the real clock this counts fractions, so a watcher wakes when a timer
    falls due rather than up to a second later; a pinned clock never moves.
    """
    pinned_at = os.environ.get("AGENTBOX_NOW")
    return at - (now() if pinned_at else time.time())
