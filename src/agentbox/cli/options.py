"""Option parsing shared by several commands: durations and commands given on the line."""

from __future__ import annotations


def duration_flag(name: str, value: str | None) -> int | None:
    """A duration flag's seconds; a bad spelling is a usage error naming the flag."""
    from agentbox.durations import parse_duration
    from agentbox.errors import BadInput, UsageError

    if value is None:
        return None
    try:
        return parse_duration(value)
    except BadInput as exc:
        raise UsageError(f"{name}: {exc}") from None


def command_flag(name: str, value: str | None, argv: list[str] | None) -> list[str] | None:
    """A command given as ``NAME CMD`` (split like a shell would) or after ``--``, not both."""
    from agentbox.config import parse_command
    from agentbox.errors import BadInput, UsageError

    if value is not None and argv:
        raise UsageError(f"give the command as {name} CMD or after --, not both")
    if argv:
        return list(argv)
    if value is None:
        return None
    try:
        return parse_command(value)
    except BadInput as exc:
        raise UsageError(f"{name}: {exc}") from None
