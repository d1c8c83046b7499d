"""How values are spelled for people: untrusted text made safe, times, sizes.

Pure functions, free of any output stream, so the library's own messages (a
run's report, a relayed stderr line) and the commands' output spell a value
the same way; :mod:`agentbox.render` writes what they spell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import tzinfo

    from agentbox.rules.breaker import Pause

# Bidi embedding, override and isolate controls: they reorder what follows them
# on the line, so a key could be shown as another one.
_BIDI = frozenset(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unsafe(char: str) -> bool:
    code = ord(char)
    return (code < 0x20 or 0x7F <= code <= 0x9F  # C0, DEL, C1: what terminals act on
            or 0xD800 <= code <= 0xDFFF  # a lone surrogate cannot even be written out
            or char in _BIDI)


def printable(text: str, newlines: bool = False) -> str:
    """``text`` with every control character shown as a Python-style escape.

    C0 and C1 controls, DEL, lone surrogates and the bidi controls become
    ``\\x1b``, ``\\t``, ``\\u202e``...; ``newlines=True`` keeps ``\\n`` (a
    table cell may hold several lines). A backslash stays itself, so the
    escapes are for reading, not for parsing: machines use ``--json``.
    """
    if text.isprintable():  # no control, format, surrogate or odd space: nothing to do
        return text
    return "".join(_escape(c) if _unsafe(c) and not (newlines and c == "\n") else c
                   for c in text)


def when(ts: int | None) -> str:
    """A Unix time for people, in every message and table: ISO 8601 in UTC.

    ``2023-11-14T22:13:20Z``: the same text on every machine and in every
    log whatever its time zone, and accepted back as it is by ``--at`` and
    ``--start``. JSON carries the Unix seconds.
    """
    if ts is None:
        return "-"
    from datetime import UTC, datetime  # here: `agentbox ingest` prints no time

    try:
        return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(ts)


def when_in(ts: int | None, zone: tzinfo | str | None) -> str:
    """A Unix time on the wall clock of ``zone`` (a tzinfo or an IANA name): ISO 8601
    with that zone's offset, ``2026-03-09T08:00:00-04:00``, which ``--at`` reads back
    as the same moment; '-' without a time or a zone."""
    if ts is None or zone is None:
        return "-"
    from datetime import datetime

    if isinstance(zone, str):
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(zone)
    try:
        return datetime.fromtimestamp(ts, tz=zone).isoformat()
    except (OverflowError, OSError, ValueError):
        return str(ts)


def size(count: int | None) -> str:
    """Bytes for people, in at most eight characters: 512 B, 1.5 KiB, 116 MiB."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" and value < 10 else f"{value:.0f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# -- pauses (agentbox.rules.breaker) ------------------------------------------------


def pause_notice(reason: str, spending: str, until: int | None) -> str:
    """The urgent message a budget pause sends, once per pause."""
    then = f" until {when(until)}" if until is not None else ""
    return (f"agentbox paused this inbox ({reason} reached: {spending} today): runs claim "
            f"nothing{then}; `agentbox resume` lifts it")


def pause_document(pause: Pause | None) -> dict[str, Any] | None:
    """A pause in JSON: ``{"reason", "since", "until"}``, or null."""
    if pause is None:
        return None
    return {"reason": pause.reason, "since": pause.since, "until": pause.until}


def describe_pause(pause: Pause | None) -> str:
    """Why nothing was claimed, and until when, for people."""
    if pause is None:
        return "not paused"
    then = (f"a probe run at {when(pause.until)}" if pause.kind == "breaker"
            else f"until {when(pause.until)}")
    return (f"paused since {when(pause.since)} ({pause.reason}): runs claim nothing; {then}; "
            "`agentbox resume` lifts it")
