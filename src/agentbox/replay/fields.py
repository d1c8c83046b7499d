"""The fields of a scenario file's steps: how each is checked, and what an expect may be.

Each check takes the raw TOML value and the scenario's start (for times written
'+DURATION'), and returns the value the step acts on or raises :class:`StepError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentbox.clock import within
from agentbox.durations import parse_duration
from agentbox.errors import BadInput


class StepError(Exception):
    """A problem with one step, turned into a message naming the file and step."""


# --- field checks: each takes the raw TOML value and the scenario's start ---

Check = Callable[[Any, int], Any]


def text(value: Any, start: int) -> str:
    if not isinstance(value, str) or not value:
        raise StepError(f"must be a non-empty string, not {value!r}")
    return value


def flag(value: Any, start: int) -> bool:
    if not isinstance(value, bool):
        raise StepError(f"must be true or false, not {value!r}")
    return value


def duration(value: Any, start: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise StepError(f"must be a duration such as 90s, 4h or 1d, not {value!r}")
    try:
        return parse_duration(value)
    except BadInput as exc:
        raise StepError(str(exc)) from None


def moment(value: Any) -> int | None:
    """Unix seconds written as such or as a TOML date-time with an offset; else None."""
    if isinstance(value, datetime) and value.utcoffset() is not None:
        value = int(value.timestamp())
    return int(value) if is_time(value) else None


def when(value: Any, start: int) -> int:
    """Unix seconds, a TOML date-time with an offset (2026-03-08T03:00:00-04:00), or
    '+DURATION' from the scenario's start ('+0s' is the start)."""
    found = moment(value)
    if found is not None:
        return found
    if isinstance(value, str) and value.startswith("+"):
        offset = value[1:].strip()
        return start if offset in ("0", "0s") else start + duration(offset, start)
    raise StepError(f"must be Unix seconds (within the years 1970 to 9999), a date-time with "
                    f"an offset, or '+DURATION' from the start, not {value!r}")


def cron(value: Any, start: int) -> str:
    from agentbox.calendar import check_cron

    try:
        return check_cron(text(value, start))
    except BadInput as exc:
        raise StepError(str(exc)) from None


def zone(value: Any, start: int) -> str:
    from agentbox.calendar import zone

    try:
        zone(text(value, start))
    except BadInput as exc:
        raise StepError(str(exc)) from None
    return str(value)


def json_object(value: Any, start: int) -> str:
    from agentbox.jsonutil import canonical_object

    if not isinstance(value, dict):
        raise StepError(f"must be a table, not {value!r}")
    try:
        return canonical_object(value)
    except (TypeError, BadInput) as exc:  # TypeError: TOML dates are not JSON
        raise StepError(f"must hold only JSON values: {exc}") from None


def toml_list(value: Any, start: int) -> list[Any]:
    if not isinstance(value, list):
        raise StepError(f"must be a list, not {value!r}")
    return value


def choice(*options: str) -> Check:
    def check(value: Any, start: int) -> str:
        if value not in options:
            raise StepError(f"must be one of {', '.join(options)}, not {value!r}")
        return str(value)
    return check


# --- what an `expect` may be, per kind ---

def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_time(value: Any) -> bool:
    """Unix seconds within the years 1970 to 9999 (see :func:`agentbox.clock.within`)."""
    return is_int(value) and within(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def is_pair(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and is_int(value[1]))


def one_of(*words: str) -> Callable[[Any], bool]:
    return lambda value: value in words


@dataclass(frozen=True)
class Expect:
    accepts: Callable[[Any], bool]
    says: str  # for the error message when a file's expect does not fit


BOOL = Expect(lambda v: isinstance(v, bool), "true or false")
INT = Expect(is_int, "a whole number")
BATCH = Expect(lambda v: is_strings(v) or is_int(v) or v in ("none", "refused"),
                "a list of source ids, a batch size, or \"none\"")

