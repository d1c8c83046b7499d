"""What a run asks for: messages, approval requests, follow-up timers and its state.

A handler answers with one JSON document; :func:`parse` turns it into an
:class:`Answer` or refuses it whole, so a malformed answer never half-applies.
Every check the finish transaction would make on a key or a timer is made
here first, so a bad answer fails the run instead of surfacing mid-finish.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agentbox.durations import parse_duration
from agentbox.errors import BadInput
from agentbox.jsonutil import canonical_object, loads_strict, type_name
from agentbox.rules.approvals import check_request_id
from agentbox.rules.records import DEFAULT_CHANNEL
from agentbox.rules.state import Change
from agentbox.rules.timers import TimerSpec, check_spec


@dataclass(frozen=True)
class Message:
    body: str
    urgent: bool = False
    channel: str = DEFAULT_CHANNEL


@dataclass(frozen=True)
class ApprovalRequest:
    id: str
    expires_in: int
    action: str


@dataclass(frozen=True)
class FollowUp:
    """A one-off timer a run asks for, ``after`` seconds from its finish."""

    name: str
    after: int
    payload: str = "{}"

    def to_timer(self, now: int) -> TimerSpec:
        return TimerSpec(name=self.name, due=now + self.after, every=None,
                         payload=self.payload, follow_up=True)




@dataclass(frozen=True)
class Usage:
    """What a run says it spent: tokens and cost, each optional (the budgets add them)."""

    tokens: int | None = None
    cost: float | None = None


@dataclass(frozen=True)
class Answer:
    messages: tuple[Message, ...] = ()
    approvals: tuple[ApprovalRequest, ...] = ()
    timers: tuple[FollowUp, ...] = ()
    state: Change | None = None  # the agent's new state, or a merge patch into it
    usage: Usage | None = None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadInput(f"{what} must be a non-empty string, not {type_name(value)}")
    if "\x00" in value:  # no backend need store it, and no channel wants it
        raise BadInput(f"{what} contains a NUL character")
    return value


def _known_keys(item: dict[str, Any], where: str, known: set[str]) -> None:
    unknown = set(item) - known
    if unknown:
        raise BadInput(f"{where} has unknown keys: {', '.join(sorted(unknown))}")


def _message(item: Any, n: int) -> Message:
    if isinstance(item, str):
        return Message(_text(item, f"messages[{n}]"))
    if isinstance(item, dict):
        _known_keys(item, f"messages[{n}]", {"body", "urgent", "channel"})
        urgent = item.get("urgent", False)
        if not isinstance(urgent, bool):
            raise BadInput(f"messages[{n}].urgent must be true or false")
        channel = _text(item.get("channel", DEFAULT_CHANNEL), f"messages[{n}].channel")
        return Message(_text(item.get("body"), f"messages[{n}].body"), urgent, channel)
    raise BadInput(f"messages[{n}] must be a string or an object, not {type_name(item)}")


def _object(item: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise BadInput(f"{where} must be an object, not {type_name(item)}")
    _known_keys(item, where, keys)
    return item


def _duration(item: dict[str, Any], key: str, where: str, example: str) -> int:
    try:
        return parse_duration(item.get(key))  # type: ignore[arg-type]
    except (BadInput, AttributeError, TypeError):
        raise BadInput(f"{where}.{key} must be a duration like {example}") from None


def _approval(item: Any, n: int) -> ApprovalRequest:
    item = _object(item, f"approvals[{n}]", {"id", "expires_in", "action"})
    expires_in = _duration(item, "expires_in", f"approvals[{n}]", "4h")
    request_id = _text(item.get("id"), f"approvals[{n}].id")
    try:
        check_request_id(request_id)
    except BadInput as exc:
        raise BadInput(f"approvals[{n}].id: {exc}") from None
    return ApprovalRequest(request_id, expires_in,
                           _text(item.get("action"), f"approvals[{n}].action"))


def _timer(item: Any, n: int) -> FollowUp:
    item = _object(item, f"timers[{n}]", {"name", "in", "payload"})
    after = _duration(item, "in", f"timers[{n}]", "15m")
    payload = item.get("payload", {})
    follow_up = FollowUp(_text(item.get("name"), f"timers[{n}].name"), after,
                         canonical_object(payload, f"timers[{n}].payload"))
    try:
        check_spec(follow_up.to_timer(0))
    except BadInput as exc:
        raise BadInput(f"timers[{n}]: {exc}") from None
    return follow_up


MAX_TOKENS = 10**15  # more than any run spends; a bigger number is a bug, not a bill


def _amount(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 <= value <= MAX_TOKENS):
        raise BadInput(f"{where} must be a non-negative number, not {value!r}")
    return float(value)


def _usage(doc: dict[str, Any]) -> Usage | None:
    """The answer's ``usage``, if any: ``{"tokens": N, "cost": X}``, each optional."""
    if "usage" not in doc:
        return None
    item = _object(doc["usage"], "usage", {"tokens", "cost"})
    tokens = item.get("tokens")
    if tokens is not None:
        if not isinstance(tokens, int) and not (isinstance(tokens, float)
                                                 and tokens.is_integer()):
            raise BadInput(f"usage.tokens must be a whole number, not {tokens!r}")
        tokens = int(_amount(tokens, "usage.tokens"))
    cost = item.get("cost")
    return Usage(tokens, None if cost is None else _amount(cost, "usage.cost"))


def _list(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise BadInput(f"{key} must be a list, not {type_name(value)}")
    return value


STATE_KEYS = {"state", "state_patch"}


def _state(doc: dict[str, Any]) -> Change | None:
    """``state`` (the whole new object) or ``state_patch`` (RFC 7396), never both."""
    if "state" in doc and "state_patch" in doc:
        raise BadInput("the answer carries both state and state_patch; send one")
    for key in ("state", "state_patch"):
        if key in doc:
            value = doc[key]
            if not isinstance(value, dict):
                raise BadInput(f"{key} must be an object, not {type_name(value)}")
            canonical_object(value, key)  # nesting and strictness, checked before the finish
            return Change(replace=value) if key == "state" else Change(patch=value)
    return None


def check_channels(answer: Answer, known: Collection[str]) -> None:
    """Refuse an answer whose message names a channel the config does not have: it is
    malformed, like any other bad key, and nothing of it is applied."""
    for n, message in enumerate(answer.messages):
        if message.channel not in known:
            raise BadInput(f"messages[{n}].channel: unknown channel {message.channel!r} "
                           f"(known: {', '.join(sorted(known))})")


def parse(text: str | bytes) -> Answer:
    """A handler's stdout as an Answer; empty output means the run chose silence."""
    if not text.strip():
        return Answer()
    doc = loads_strict(text, "the answer")
    if not isinstance(doc, dict):
        raise BadInput(f"the answer must be a JSON object, not {type_name(doc)}")
    _known_keys(doc, "the answer", {"messages", "approvals", "timers", *STATE_KEYS, "usage"})
    return Answer(
        messages=tuple(_message(m, n) for n, m in enumerate(_list(doc, "messages"))),
        approvals=tuple(_approval(a, n) for n, a in enumerate(_list(doc, "approvals"))),
        timers=tuple(_timer(t, n) for n, t in enumerate(_list(doc, "timers"))),
        state=_state(doc),
        usage=_usage(doc),
    )
