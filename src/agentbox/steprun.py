"""Journaled steps inside a run: ``agentbox step KEY -- CMD…`` and ``batch.step(KEY, fn)``.

A run names itself to its handler in ``AGENTBOX_RUN`` (inbox, user, holder,
generation: :func:`run_env`); a step reopens that inbox and asks the journal
(:meth:`agentbox.ledger.steps.Steps.begin_step`) whether the run still holds
the lease, and whether KEY is done already, in one transaction. Only then
does the work run, seeing ``AGENTBOX_STEP_KEY`` (stable for every try of KEY,
different between inboxes) and ``AGENTBOX_STEP_ATTEMPT``; its end is recorded
whether or not the lease moved on meanwhile (see :mod:`agentbox.ledger.steps`).

What is once and what may repeat: a ``done`` step never runs again; a worker
without the lease starts nothing; a try killed inside its work left no end,
so the next try runs it again (at-least-once, under the same key) or parks it
``uncertain`` (at-most-once).

Under ``agentbox rehearse`` the handler's environment also holds
``AGENTBOX_REHEARSAL`` (:data:`REHEARSAL_VARIABLE`): a file where each try that
runs notes its KEY, so the rehearsal sees which steps a run began, and, when
the rehearsal's fault is a kill inside a step, which try it strikes. That try's
work runs, then the step SIGKILLs its whole process group (the handler, the
step, all they started) before the try's end is recorded: the worst moment to
die, the side effect done and the journal still saying ``started``.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, NamedTuple

from agentbox.errors import Busy, UsageError, WorkFailed

if TYPE_CHECKING:
    from agentbox.ledger.store import Store
    from agentbox.rules.steps import Outcome

RUN_VARIABLE = "AGENTBOX_RUN"
REHEARSAL_VARIABLE = "AGENTBOX_REHEARSAL"
CHUNK = 65536


class RunRef(NamedTuple):
    """The run a step belongs to, as ``AGENTBOX_RUN`` names it."""

    db: str
    user: str
    holder: str
    generation: int


class StepTry(NamedTuple):
    """What the work of one try sees: the stable key to deduplicate on, and its attempt."""

    key: str       # AGENTBOX_STEP_KEY
    attempt: int   # AGENTBOX_STEP_ATTEMPT: 1, 2, ...


class Ran(NamedTuple):
    """How a step went: ``memo`` (a done KEY's recorded output) or ``ran`` (this try)."""

    action: str
    attempt: int
    output: bytes | None
    exit_code: int
    error: str | None = None
    kept: bool = True  # False: a newer try of KEY began meanwhile; this end was not recorded


class Fenced(Busy):
    """The run no longer holds the lease: the step started nothing (exit 75)."""


class Uncertain(WorkFailed):
    """A try of the step died inside it and the mode is at-most-once: nothing ran (exit 1)."""


def run_env(db: str, user: str, holder: str, generation: int) -> str:
    """``AGENTBOX_RUN``: what a step needs to find its run's inbox and fence."""
    return json.dumps({"db": db, "user": user, "holder": holder, "generation": generation})


def current_run(environ: Mapping[str, str] | None = None) -> RunRef:
    """The run named by ``AGENTBOX_RUN``; outside a run a usage error."""
    text = (os.environ if environ is None else environ).get(RUN_VARIABLE)
    if not text:
        raise UsageError(f"a step runs inside a run only: {RUN_VARIABLE} is not set (agentbox "
                         "run sets it for its handler)")
    try:
        doc = json.loads(text)
        return RunRef(str(doc["db"]), str(doc["user"]), str(doc["holder"]),
                      int(doc["generation"]))
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{RUN_VARIABLE} is not what agentbox run sets") from None


def open_run_store(run: RunRef) -> Store:
    """The run's inbox, opened again by the step (never created: the run made it)."""
    from agentbox.location import open_store

    return open_store(run.db, run.user, create=False)


def journaled(store: Store, run: RunRef, key: str, mode: str,
              work: Callable[[StepTry], Outcome], clock: Callable[[], int]) -> Ran:
    """One try of step ``key``: the fence and the memo, then ``work``, then its end.

    Raises :class:`Fenced` when the run lost its lease and :class:`Uncertain` when
    the KEY is parked; nothing runs then. An exception from ``work`` is recorded
    as the try's failure and raised again.
    """
    from agentbox.rules.steps import Outcome, step_key

    begun = store.begin_step(run.holder, run.generation, key, clock(), mode)
    if begun.action == "fenced":
        raise Fenced(f"step {key!r} not started: this run no longer holds the lease "
                     f"(generation {run.generation})")
    if begun.action == "uncertain":
        raise Uncertain(f"step {key!r} is uncertain: a try of it never finished and the "
                        "mode is at-most-once; settle it with `agentbox steps resolve`")
    if begun.action == "memo":
        return Ran("memo", begun.attempt, begun.output, 0)
    attempt = StepTry(step_key(store.instance_id(), key), begun.attempt)
    strike = _rehearsed(key)
    try:
        outcome = work(attempt)
    except Exception as exc:
        if strike:
            _die()
        store.end_step(key, run.generation, begun.attempt,
                       Outcome("failed", 1, None, f"{type(exc).__name__}: {exc}"[:500]),
                       clock())
        raise
    if strike:
        _die()
    kept = store.end_step(key, run.generation, begun.attempt, outcome, clock())
    return Ran("ran", begun.attempt, outcome.output, outcome.exit_code, outcome.error, kept)


def _rehearsed(key: str) -> bool:
    """Under a rehearsal, note this try in the run's step log; True when the rehearsal's
    fault is to kill the run inside it (``kill_step`` names that try's ordinal in the run)."""
    text = os.environ.get(REHEARSAL_VARIABLE)
    if not text:
        return False
    doc = json.loads(text)  # written by agentbox.rehearsal.play, never by a user
    with open(doc["steps"], "a+b") as log:
        fcntl.flock(log, fcntl.LOCK_EX)  # steps of one run may run side by side
        log.write(json.dumps(key).encode("utf-8") + b"\n")
        log.flush()
        log.seek(0)
        tries = log.read().count(b"\n")
    return bool(doc.get("kill_step") == tries)


def _die() -> None:
    """The rehearsal's kill inside a step: the handler's whole group, this process too."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def command_work(argv: Sequence[str], out: IO[bytes], max_output: int,
                 environ: Mapping[str, str] | None = None) -> Callable[[StepTry], Outcome]:
    """The work of ``agentbox step``: run ``argv`` (no shell), its stdout passed through to
    ``out`` and kept up to ``max_output`` bytes, its stdin and stderr the step's own."""
    from agentbox.rules.steps import Outcome, outcome

    def work(attempt: StepTry) -> Outcome:
        env = {**(os.environ if environ is None else environ),
               "AGENTBOX_STEP_KEY": attempt.key, "AGENTBOX_STEP_ATTEMPT": str(attempt.attempt)}
        try:
            proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, env=env)
        except OSError as exc:
            return Outcome("failed", 127, None,
                           f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        stdout = proc.stdout
        assert isinstance(stdout, io.BufferedReader)
        kept = bytearray()
        with stdout:
            while chunk := stdout.read1(CHUNK):
                out.write(chunk)
                out.flush()
                if len(kept) <= max_output:
                    kept += chunk[:max_output + 1 - len(kept)]
        code = proc.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number
        return outcome(code, bytes(kept[:max_output]), len(kept) > max_output, max_output)

    return work
