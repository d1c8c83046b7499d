"""What `doctor` calls healthy: each verdict a pure function of what was read.

A backend reads its own file or server (integrity, schema, permissions,
journal size) and the store's state; these functions turn the readings
into :class:`Check` lines, so every backend draws
the line in the same place.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from typing import NamedTuple

from agentbox.durations import format_duration
from agentbox.rules.lease import taken
from agentbox.rules.records import Lease


class Check(NamedTuple):
    """One line of `doctor`: what was checked, whether it is well, and what was found."""

    name: str
    ok: bool
    detail: str


WAL_LIMIT = 64 * 1024 * 1024  # a journal this big means checkpoints are being starved
PENDING_AGE_LIMIT = 3600      # default: an event waiting longer means runs are not happening


def lease(current: Lease | None, now: int, holder_alive: bool | None) -> Check:
    """Held or free is fine; held by a process known to be gone is stale.

    ``holder_alive`` is None when it cannot be told (the holder runs on
    another host): then a live lease is taken at its word.
    """
    if current is None:
        return Check("lease", True, "never taken")
    who = f"{current.holder}, generation {current.generation}"
    if not taken(current, now):
        return Check("lease", True, f"free (last held by {who})")
    if holder_alive is False:
        return Check("lease", False, f"stale: held by {who}, whose process is gone; "
                                     f"the next run waits until it expires in "
                                     f"{format_duration(current.until - now + 1)}")
    return Check("lease", True, f"held by {who} for {format_duration(current.until - now + 1)}")


def running(claims: Sequence[tuple[int, int | None]], current: Lease | None,
            now: int) -> Check:
    """Events left running past the lease that claimed them: their worker is gone.

    ``claims`` are (event id, claim generation) of the running events. The
    next run puts them back to pending, so this is a symptom, not damage.
    """
    held = taken(current, now)
    stuck = sorted(i for i, generation in claims
                   if not held or current is None or generation != current.generation)
    if not stuck:
        return Check("running", True, f"{len(claims)} running under the live lease"
                     if claims else "none running")
    shown = ", ".join(map(str, stuck[:10])) + (", …" if len(stuck) > 10 else "")
    return Check("running", False, f"{len(stuck)} event(s) stuck running past their lease "
                                   f"({shown}); the next run retries them")


def uncertain(messages: int) -> Check:
    if not messages:
        return Check("uncertain", True, "no uncertain dispatch")
    return Check("uncertain", False, f"{messages} message(s) in uncertain dispatches: check "
                                     "the channel, then `agentbox outbox resolve KEY`")


def pending(oldest: int | None, now: int, limit: int = PENDING_AGE_LIMIT) -> Check:
    """The oldest pending event should not wait longer than ``limit``."""
    if oldest is None:
        return Check("pending", True, "nothing pending")
    age = max(0, now - oldest)
    text = f"oldest pending event is {format_duration(age)} old"
    if age > limit:
        return Check("pending", False, f"{text} (limit {format_duration(limit)}): "
                                       "are runs happening?")
    return Check("pending", True, text)


def journal(wal_bytes: int, limit: int = WAL_LIMIT) -> Check:
    if wal_bytes > limit:
        return Check("wal", False, f"write-ahead log is {wal_bytes:,} bytes (limit "
                                   f"{limit:,}): a long reader is holding back checkpoints")
    return Check("wal", True, f"write-ahead log is {wal_bytes:,} bytes")


def private(modes: Sequence[tuple[str, int]]) -> Check:
    """Files readable or writable by others, and folders others may write into.

    ``modes`` are (path, st_mode) pairs of the inbox's files and its folder.
    A folder such as /tmp (sticky, world-writable) is tolerated: others can
    neither remove nor replace what is in it.
    """
    problems = []
    for path, mode in modes:
        loose = stat.S_IMODE(mode) & 0o077
        if stat.S_ISDIR(mode):
            if loose & 0o022 and not mode & stat.S_ISVTX:
                problems.append(f"folder {path} is writable by others "
                                f"(mode {stat.S_IMODE(mode):04o})")
        elif loose:
            problems.append(f"{path} is open to others (mode {stat.S_IMODE(mode):04o}; "
                            "want 0600)")
    if problems:
        return Check("permissions", False, "; ".join(problems))
    return Check("permissions", True, "files 0600, folder not writable by others"
                 if modes else "no file yet")


def paused(detail: str | None) -> Check:
    """A paused inbox claims nothing: someone should look (and `agentbox resume`).
    ``detail`` says since when, why and until when (None: not paused)."""
    if detail is None:
        return Check("paused", True, "not paused")
    return Check("paused", False, detail)
