"""Journaled steps: what a step's KEY may be, and what a try of it does next.

A step is recorded ``started`` before its command runs and ``done`` or
``failed`` after; what a new try finds in the journal decides whether the
command runs (:func:`decide`). The fence (does the run still hold the lease?)
is checked by the caller before any of this, in the same transaction.
"""

from __future__ import annotations

from typing import NamedTuple

from agentbox.errors import BadInput, UsageError

MAX_KEY = 200  # characters
STEP_STATES = ("started", "done", "failed", "uncertain")
STEP_MODES = ("at-least-once", "at-most-once")


def check_key(key: str) -> str:
    """A step's KEY: 1-200 characters, no NUL, no control characters."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
        raise BadInput(f"a step key is 1-{MAX_KEY} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise BadInput("a step key cannot contain control characters")
    return key


def check_mode(mode: str) -> str:
    if mode not in STEP_MODES:
        raise UsageError(f"step mode must be one of {', '.join(STEP_MODES)}, not {mode!r}")
    return mode


def check_state(state: str) -> str:
    if state not in STEP_STATES:
        raise UsageError(f"step state must be one of {', '.join(STEP_STATES)}, not {state!r}")
    return state


class Decision(NamedTuple):
    """What a try of a step does: ``run`` (as ``attempt``), ``memo`` (print the result),
    or ``uncertain`` (run nothing and fail; an operator settles it)."""

    action: str
    attempt: int


def decide(found: tuple[str, int] | None, mode: str) -> Decision:
    """What a try does, given the journal's (status, attempts) for its KEY, or None when
    it has no row: then it runs as attempt 1.

    A ``done`` step is never run again. A ``failed`` one ran to its end and said
    so: it runs again. A ``started`` one never finished (its worker died inside
    it, or its step process did): its outcome is unknown, so at-least-once runs
    it again and at-most-once parks it ``uncertain``, as an ``uncertain`` one stays.
    """
    if found is None:
        return Decision("run", 1)
    status, attempts = found
    if status == "done":
        return Decision("memo", attempts)
    if status == "uncertain" or (status == "started" and mode == "at-most-once"):
        return Decision("uncertain", attempts)
    return Decision("run", attempts + 1)


def step_key(instance: str, key: str) -> str:
    """``AGENTBOX_STEP_KEY``: the same for every try of KEY, different between inboxes
    (the instance id is random per inbox) and safe to pass to any API (hex)."""
    import hashlib

    return f"{instance}-step-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}"


class Outcome(NamedTuple):
    """How a try of a step's command ended: recorded ``done`` or ``failed``."""

    status: str
    exit_code: int
    output: bytes | None  # a done step's stdout; None for a failed one
    error: str | None


def outcome(exit_code: int, stdout: bytes, truncated: bool, max_output: int) -> Outcome:
    """A finished command as the journal records it: exit 0 is ``done`` with its stdout,
    unless the stdout passed ``max_output`` (then it is ``failed``: a cut result must
    never be handed back as the step's)."""
    if exit_code != 0:
        return Outcome("failed", exit_code, None, f"exit {exit_code}")
    if truncated:
        return Outcome("failed", exit_code, None,
                       f"stdout larger than {max_output} bytes (max_step_output); not kept")
    return Outcome("done", 0, stdout, None)


class Step(NamedTuple):
    """One KEY of the journal, as ``steps list|show`` show it."""

    key: str
    status: str
    attempts: int
    generation: int
    started_at: int
    finished_at: int | None
    exit_code: int | None
    output: bytes | None
    error: str | None

    def document(self, with_output: bool = False) -> dict[str, object]:
        doc: dict[str, object] = {
            "key": self.key, "status": self.status, "attempts": self.attempts,
            "generation": self.generation, "started_at": self.started_at,
            "finished_at": self.finished_at, "exit_code": self.exit_code,
            "error": self.error,
            "output_bytes": None if self.output is None else len(self.output)}
        if with_output:
            doc["output"] = (None if self.output is None
                             else self.output.decode("utf-8", "replace"))
        return doc


class Begun(NamedTuple):
    """What :meth:`agentbox.ledger.steps.Steps.begin_step` found: ``fenced`` (the run
    no longer holds the lease), or a :class:`Decision`'s action, with the attempt
    to run as and, for a memo, the recorded output."""

    action: str
    attempt: int = 0
    output: bytes | None = None
