"""Every error agentbox reports, each carrying the exit code docs/design.md gives it.

The CLI turns any of these into one line on stderr and its exit code; anything
else that escapes is an unexpected error (exit 1), still without a traceback.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_AS_ASKED = 3
    DATA = 65
    TEMPFAIL = 75
    SIGNATURE = 77


class AgentboxError(Exception):
    """Base class; ``exit_code`` is what the process exits with."""

    exit_code: Exit = Exit.FAILURE


class UsageError(AgentboxError):
    exit_code = Exit.USAGE


class BadInput(AgentboxError):
    """Input data that can never be stored: bad JSON, too large, bad user name."""

    exit_code = Exit.DATA


class NoInbox(BadInput):
    """An inbox that does not exist, opened by something that must not create it.

    The CLI turns it into a notice naming the inboxes that do exist."""

    def __init__(self, location: str) -> None:
        super().__init__(f"no inbox at {location}")
        self.location = location


class DatabaseError(AgentboxError):
    """The database file cannot be used: corrupt, read-only, or from a newer agentbox."""

    exit_code = Exit.FAILURE


class Busy(AgentboxError):
    """Temporary: the lease is held elsewhere or the database stayed locked."""

    exit_code = Exit.TEMPFAIL


class SignatureMismatch(AgentboxError):
    exit_code = Exit.SIGNATURE


class WorkFailed(AgentboxError):
    """A handler or sender that failed or timed out."""

    exit_code = Exit.FAILURE


class NotAsAsked(AgentboxError):
    """The request was answered, but not as asked (a conflict, an answer that did not stand)."""

    exit_code = Exit.NOT_AS_ASKED
