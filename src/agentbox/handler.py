"""A handler written as a Python function, not as JSON plumbing.

``agentbox run`` starts the handler as a program, hands it a batch as JSON on
stdin and reads its answer as JSON on stdout (see docs/handler.md). This
module does both ends for a Python function::

    from agentbox.handler import Batch, Reply, handler

    @handler
    def answer(batch: Batch) -> Reply | None:
        texts = [event.payload.get("text", "") for event in batch.events]
        return Reply(messages=[f"{len(texts)} new message(s)"])

    if __name__ == "__main__":
        answer.main()

and ``agentbox run -- python3 agent.py`` runs it. ``batch.state`` is the agent's
state, ``Reply(state=…)`` or ``Reply(state_patch=…)`` writes it with the finish,
and ``batch.step(KEY, fn)`` runs ``fn`` once as a journaled step
(docs/durable-runs.md). Returning ``None`` (or an
empty :class:`Reply`) chooses silence; raising fails the run, so the events
are retried (the exception's last line reaches the event's history). The
reply is checked against the same rules ``agentbox run`` applies before it is
printed, so a bad reply fails inside the handler, with its own traceback.

The decorated function stays callable with a :class:`Batch`, for tests.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeVar

from agentbox import clock
from agentbox.jsonutil import loads_strict
from agentbox.steprun import StepTry

if TYPE_CHECKING:
    from agentbox.ledger.store import Store
    from agentbox.rules.policy import Policy
    from agentbox.rules.steps import Outcome
    from agentbox.steprun import RunRef

T = TypeVar("T")
__all__ = ["Approval", "Batch", "Event", "Handler", "Message", "Reply", "StepTry", "Timer",
           "handler"]


@functools.cache
def _run_context() -> tuple[RunRef, Store, Policy]:
    """The run this handler process works for, its inbox (opened once, for every step)
    and the settings its steps follow."""
    from agentbox import paths
    from agentbox.config import resolve
    from agentbox.steprun import current_run, open_run_store

    run = current_run()
    return run, open_run_store(run), resolve(paths.config_path(), run.user).policy


def _result(value: Any, max_output: int) -> Outcome:
    """A step function's return value as the journal keeps it: canonical JSON."""
    from agentbox.jsonutil import canonical
    from agentbox.rules.steps import outcome

    data = canonical(value).encode("utf-8")
    return outcome(0, data[:max_output], len(data) > max_output, max_output)


@dataclass(frozen=True)
class Event:
    """One event of the batch, as ``agentbox run`` hands it over."""

    id: int
    source: str
    source_id: str
    payload: dict[str, Any]
    attempt: int
    idempotency_key: str  # stable across retries and replays: dedupe side effects on it


@dataclass(frozen=True)
class Batch:
    user: str
    generation: int
    events: tuple[Event, ...]
    state: dict[str, Any] = field(default_factory=dict)  # the agent's state as it stands
    state_version: int = 0

    @classmethod
    def from_json(cls, text: str | bytes) -> Batch:
        doc = loads_strict(text, "batch")
        return cls(user=doc["user"], generation=doc["generation"],
                   events=tuple(Event(**event) for event in doc["events"]),
                   state=doc.get("state", {}), state_version=doc.get("state_version", 0))

    def step(self, key: str, fn: Callable[[StepTry], T], mode: str | None = None) -> T:
        """Run ``fn`` as the journaled step ``key`` of this run, as ``agentbox step`` does.

        A ``done`` KEY is not run again: its recorded result comes back. Without
        the lease nothing runs (:class:`~agentbox.steprun.Fenced`, which fails the
        handler); a KEY parked uncertain raises :class:`~agentbox.steprun.Uncertain`.
        ``fn`` gets a :class:`StepTry` (``.key`` is stable for every try of KEY:
        pass it to any API that deduplicates; ``.attempt`` counts tries) and returns
        a JSON value, which is the step's result; raising records the try failed.
        ``mode`` (``at-least-once`` or ``at-most-once``) says what a try that died
        inside ``fn`` leads to (default: the ``step_mode`` setting). Only inside
        ``agentbox run`` (it reads ``AGENTBOX_RUN``).
        """
        from agentbox.rules.steps import check_mode
        from agentbox.steprun import journaled

        run, store, policy = _run_context()
        ran = journaled(store, run, key, policy.step_mode if mode is None else check_mode(mode),
                        lambda attempt: _result(fn(attempt), policy.max_step_output),
                        clock.now)
        if ran.error is not None:
            from agentbox.errors import BadInput

            raise BadInput(f"step {key!r}: {ran.error}")
        result: T = json.loads(ran.output or b"null")
        return result


@dataclass(frozen=True)
class Message:
    body: str
    urgent: bool = False  # goes out at once, taking the other held messages with it
    channel: str = "default"  # a channel of config.toml's [channels.NAME]


@dataclass(frozen=True)
class Usage:
    """What the run spent, counted against the daily budgets; each part optional."""

    tokens: int | None = None
    cost: float | None = None


class TemporaryFailure(Exception):
    """Not the events' fault (the model API is down): the handler exits 75, the events'
    attempts are given back and they are tried again after a wait."""


@dataclass(frozen=True)
class Approval:
    """Ask a person; the answer, or 'expired' after ``expires_in``, arrives as an event."""

    id: str
    expires_in: int | str  # seconds, or a duration such as "4h"
    action: str


@dataclass(frozen=True)
class Timer:
    """A one-off timer: an event under source 'timer' after ``after``."""

    name: str
    after: int | str  # seconds, or a duration such as "15m"
    payload: dict[str, Any] | None = None


@dataclass
class Reply:
    messages: Sequence[str | Message] = field(default_factory=list)
    approvals: Sequence[Approval] = field(default_factory=list)
    timers: Sequence[Timer] = field(default_factory=list)
    state: dict[str, Any] | None = None  # the agent's whole new state
    state_patch: dict[str, Any] | None = None  # or an RFC 7396 merge patch into it
    usage: Usage | None = None

    def document(self) -> dict[str, Any]:
        """The reply in the handler protocol's JSON shape."""
        doc: dict[str, Any] = {
            "messages": [_message(m) for m in self.messages],
            "approvals": [{"id": a.id, "expires_in": a.expires_in, "action": a.action}
                          for a in self.approvals],
            "timers": [{"name": t.name, "in": t.after, "payload": t.payload or {}}
                       for t in self.timers],
            **({} if self.state is None else {"state": self.state}),
            **({} if self.state_patch is None else {"state_patch": self.state_patch}),
        }
        if self.usage is not None:
            doc["usage"] = {k: v for k, v in (("tokens", self.usage.tokens),
                                              ("cost", self.usage.cost)) if v is not None}
        return doc

    def to_json(self) -> str:
        """The reply as ``agentbox run`` reads it, checked by the same rules first."""
        from agentbox.rules.answer import parse

        text = json.dumps(self.document(), ensure_ascii=False)
        parse(text)  # raises BadInput, naming the offending field, on a reply run would refuse
        return text


def _message(message: str | Message) -> dict[str, Any]:
    if isinstance(message, str):
        return {"body": message, "urgent": False}
    doc: dict[str, Any] = {"body": message.body, "urgent": message.urgent}
    if message.channel != "default":
        doc["channel"] = message.channel
    return doc


class Handler:
    """A function from a :class:`Batch` to a :class:`Reply`, runnable as a handler program."""

    def __init__(self, function: Callable[[Batch], Reply | None]) -> None:
        self.function = function
        self.__doc__ = function.__doc__
        self.__name__ = getattr(function, "__name__", "handler")

    def __call__(self, batch: Batch) -> Reply | None:
        return self.function(batch)

    def main(self, stdin: IO[bytes] | None = None, stdout: IO[str] | None = None) -> None:
        """Read one batch, answer it, exit: 0 with the reply printed, 75 on a
        :class:`TemporaryFailure`, 1 on any other error."""
        raise SystemExit(self.run(stdin or sys.stdin.buffer, stdout or sys.stdout))

    def run(self, stdin: IO[bytes], stdout: IO[str]) -> int:
        try:
            reply = self.function(Batch.from_json(stdin.read()))
            text = "" if reply is None else reply.to_json()
        except TemporaryFailure:
            traceback.print_exc()
            return 75  # EX_TEMPFAIL
        except Exception:
            traceback.print_exc()
            return 1
        stdout.write(text)
        stdout.flush()
        return 0


def handler(function: Callable[[Batch], Reply | None]) -> Handler:
    """Make ``function`` a handler program: call ``.main()`` under ``__main__``."""
    return Handler(function)
