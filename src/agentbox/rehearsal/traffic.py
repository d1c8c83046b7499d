"""The export format: an inbox's recorded traffic as JSON lines, version 1.

The first line is a header object::

    {"format": "agentbox-traffic", "version": 1, "user": "alice", "timezone": "UTC",
     "since": null, "until": null, "exported_at": 1767225600, "settings": {...}}

``settings`` are the inbox's rules as they stood (every :class:`Policy` field);
a rehearsal runs under the settings in force where it runs, and says where
they differ. Then one object per recorded thing, in time order (``at``, Unix
seconds):

- ``{"type": "event", "at", "source", "key", "payload"}``: an arrival, its
  payload in the canonical form the inbox stored;
- ``{"type": "answer", "at", "approval", "reply"}``: an approval answered;
- ``{"type": "send", "at", "channel", "body", "urgent", "state"}``: a dispatch
  claimed then (``state`` sent, or sending/uncertain: it may have gone out).

A reader refuses a newer version and unknown record types, and ignores fields
it does not know, so a later version may add fields without breaking it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentbox.errors import BadInput
from agentbox.jsonutil import canonical_object, loads_strict
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from agentbox.rules.records import Answered, Spoke

FORMAT = "agentbox-traffic"
VERSION = 1
RECORD_TYPES = ("event", "answer", "send")
_RANK = {kind: n for n, kind in enumerate(RECORD_TYPES)}  # the order within one second


@dataclass(frozen=True)
class Arrival:
    at: int
    source: str
    key: str
    payload: str  # canonical JSON object


@dataclass(frozen=True)
class Header:
    user: str
    timezone: str | None
    since: int | None
    until: int | None
    exported_at: int
    settings: dict[str, Any]

    def document(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "user": self.user,
                "timezone": self.timezone, "since": self.since, "until": self.until,
                "exported_at": self.exported_at, "settings": self.settings}

    @property
    def end(self) -> int:
        """The end of the recorded window: a rehearsal's clock stops there."""
        return self.until if self.until is not None else self.exported_at


@dataclass(frozen=True)
class Recording:
    """An inbox's recorded traffic: the header, and each kind of record in time order."""

    header: Header
    arrivals: list[Arrival] = field(default_factory=list)
    answers: list[Answered] = field(default_factory=list)
    sends: list[Spoke] = field(default_factory=list)

    @property
    def end(self) -> int:
        times = [self.header.end, *(a.at for a in self.arrivals),
                 *(a.at for a in self.answers), *(s.at for s in self.sends)]
        return max(times)


def settings_of(policy: Policy) -> dict[str, Any]:
    return dict(policy._asdict())


def record(store: Store, user: str, timezone: str | None, policy: Policy, now: int,
           since: int | None = None, until: int | None = None) -> Recording:
    """What the inbox holds of its traffic in the window, read through the store."""
    header = Header(user, timezone, since, until, now, settings_of(policy))
    arrivals = [Arrival(e.created_at, e.source, e.source_id, e.payload)
                for e in store.arrivals(since, until)]
    return Recording(header, arrivals, store.answers(since, until), store.sends(since, until))


def lines(traffic: Recording) -> Iterator[str]:
    """The JSON lines of an export, header first, then every record in time order."""
    yield json.dumps(traffic.header.document(), ensure_ascii=False)
    items: list[tuple[int, int, int, str]] = []
    for n, a in enumerate(traffic.arrivals):
        # The payload is stored canonical: spliced in as it is, never re-spelled.
        items.append((a.at, _RANK["event"], n, json.dumps(
            {"type": "event", "at": a.at, "source": a.source, "key": a.key},
            ensure_ascii=False)[:-1] + f', "payload": {a.payload}}}'))
    for n, answer in enumerate(traffic.answers):
        items.append((answer.at, _RANK["answer"], n, json.dumps(
            {"type": "answer", "at": answer.at, "approval": answer.approval,
             "reply": answer.reply}, ensure_ascii=False)))
    for n, s in enumerate(traffic.sends):
        items.append((s.at, _RANK["send"], n, json.dumps(
            {"type": "send", "at": s.at, "channel": s.channel, "body": s.body,
             "urgent": s.urgent, "state": s.state}, ensure_ascii=False)))
    items.sort()
    for *_, text in items:
        yield text


# -- reading -------------------------------------------------------------------

_KINDS: dict[object, str] = {str: "a string", int: "an integer",
                             dict: "a JSON object"}


def _field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...],
           optional: bool = False) -> Any:
    value = obj.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadInput(f"{name!r} must be {_KINDS.get(kind, 'given')}")
    return value


def _time(obj: dict[str, Any], name: str, optional: bool = False) -> int | None:
    from agentbox.clock import check_time

    value = _field(obj, name, int, optional)
    return None if value is None else check_time(value, f"{name!r} is")


def _header(obj: dict[str, Any]) -> Header:
    if obj.get("format") != FORMAT:
        raise BadInput(f"the first line is not an agentbox traffic header "
                       f"(\"format\": \"{FORMAT}\")")
    version = _field(obj, "version", int)
    if version > VERSION:
        raise BadInput(f"format version {version} is newer than this agentbox reads "
                       f"({VERSION})")
    settings = _field(obj, "settings", dict, optional=True) or {}
    exported = _time(obj, "exported_at")
    assert exported is not None
    return Header(_field(obj, "user", str), _field(obj, "timezone", str, optional=True),
                  _time(obj, "since", True), _time(obj, "until", True), exported, settings)


def _add(traffic: Recording, obj: dict[str, Any]) -> None:
    kind = obj.get("type")
    at = _time(obj, "at")
    assert at is not None
    if kind == "event":
        payload = str(canonical_object(_field(obj, "payload", dict)))
        traffic.arrivals.append(Arrival(at, _field(obj, "source", str), _field(obj, "key", str),
                                        payload))
    elif kind == "answer":
        reply = _field(obj, "reply", str)
        if reply not in ("yes", "no"):
            raise BadInput(f"'reply' is yes or no, not {reply!r}")
        traffic.answers.append(Answered(at, _field(obj, "approval", str), reply))
    elif kind == "send":
        traffic.sends.append(Spoke(at, _field(obj, "channel", str), _field(obj, "body", str),
                                   _field(obj, "state", str, optional=True) or "sent",
                                   bool(obj.get("urgent", False))))
    else:
        raise BadInput(f"unknown record type {kind!r} (one of {', '.join(RECORD_TYPES)})")


def read(source: Iterable[bytes | str], origin: str) -> Recording:
    """An export read back; BadInput names ``origin`` and the line of any problem."""
    traffic: Recording | None = None
    n = 0
    for n, raw in enumerate(source, 1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = loads_strict(text, "the line")
            if not isinstance(obj, dict):
                raise BadInput("a line is one JSON object")
            if traffic is None:
                traffic = Recording(_header(obj))
            else:
                _add(traffic, obj)
        except BadInput as exc:
            raise BadInput(f"{origin} line {n}: {exc}") from None
    if traffic is None:
        raise BadInput(f"{origin}: empty, no traffic header")
    for kept in (traffic.arrivals, traffic.answers, traffic.sends):
        kept.sort(key=lambda r: r.at)  # stable: the file's order within a second stands
    return traffic
