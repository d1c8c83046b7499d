"""Option parsing shared by several commands: durations, times, commands, addresses."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

T = TypeVar("T")


def _as_usage(name: str, parse: Callable[[], T]) -> T:
    """Run a parser; its BadInput becomes a usage error naming the flag."""
    from agentbox.errors import BadInput, UsageError

    try:
        return parse()
    except BadInput as exc:
        raise UsageError(f"{name}: {exc}") from None


def checked_flag(name: str, value: str, check: Callable[[str], None]) -> str:
    """A flag's value, checked before anything is opened by the rule that governs it
    (the store checks it again for every other caller): a usage error naming the flag."""
    _as_usage(name, lambda: check(value))
    return value


def duration_flag(name: str, value: str | None) -> int | None:
    """A duration flag's seconds; a bad spelling is a usage error naming the flag."""
    from agentbox.durations import parse_duration

    return None if value is None else _as_usage(name, lambda: parse_duration(value))


def time_flag(name: str, value: str, now: int, zone: Callable[[], ZoneInfo]) -> int:
    """A time flag as Unix seconds; a bad spelling is a usage error naming the flag.

    A time written without a zone is read in ``zone()``; one the clocks skip
    there is bad input (65), like any other time that cannot be, and so is a
    time outside the years 1970 to 9999.
    """
    from agentbox.durations import parse_time

    when = _as_usage(name, lambda: parse_time(value, now))
    if isinstance(when, int):
        from agentbox.clock import check_time

        return check_time(when, f"{name} is")
    from agentbox.calendar import from_local
    from agentbox.errors import BadInput

    try:
        return from_local(when, zone())
    except BadInput as exc:
        raise BadInput(f"{name}: {exc}") from None


def since_flag(name: str, value: str | None, now: int,
               zone: Callable[[], ZoneInfo]) -> int | None:
    """A time flag (see :func:`time_flag`) that also takes a duration meaning that long
    ago (``2h``, ``7d``)."""
    if value is None:
        return None
    from agentbox.durations import parse_duration
    from agentbox.errors import BadInput, UsageError

    try:
        return time_flag(name, value, now, zone)
    except UsageError as exc:
        try:
            return now - parse_duration(value)
        except BadInput:
            raise UsageError(f"{exc}, or a duration ago such as 2h") from None


def command_flag(name: str, value: str | None, argv: list[str] | None) -> list[str] | None:
    """A command given as ``NAME CMD`` (split like a shell would) or after ``--``, not both."""
    from agentbox.config import parse_command
    from agentbox.errors import UsageError

    if value is not None and argv:
        raise UsageError(f"give the command as {name} CMD or after --, not both")
    if argv:
        return list(argv)
    if value is None:
        return None
    return _as_usage(name, lambda: parse_command(value))


def listen_flag(name: str, value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6; port 0 picks a free one) as a socket address."""
    from agentbox.errors import UsageError

    host, colon, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise UsageError(f"{name}: expected HOST:PORT (e.g. 127.0.0.1:8787 or [::1]:8787), "
                         f"not {value!r}")
    return host, int(port)


def offer(values: Callable[[], Iterable[str]]) -> Callable[[str], list[str]]:
    """Shell completion for a fixed set of values, looked up only when completing.

    ``values`` imports what it needs when called, so a module declaring an
    option with it loads nothing more for a normal run.
    """

    def complete(incomplete: str) -> list[str]:
        return [value for value in values() if value.startswith(incomplete)]

    return complete


def _catch_up_modes() -> Iterable[str]:
    from agentbox.rules.records import CATCH_UP_MODES

    return CATCH_UP_MODES


def _delivery_modes() -> Iterable[str]:
    from agentbox.rules.records import DELIVERY_MODES

    return DELIVERY_MODES


def _answers() -> Iterable[str]:
    from agentbox.rules.approvals import ANSWERS

    return ANSWERS


def _settings() -> Iterable[str]:
    from agentbox.config import KEYS

    return KEYS


complete_catch_up = offer(_catch_up_modes)
complete_delivery = offer(_delivery_modes)
complete_answer = offer(_answers)
complete_setting = offer(_settings)
