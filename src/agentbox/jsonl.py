"""Bulk ingest of JSON lines: parse each line, store the good ones, report every line.

The format lives here (framing, the envelope, the report); what a delivery
must be is :mod:`agentbox.delivery`'s, the same for every way in.

A bad line (invalid UTF-8 or JSON, a missing key, a payload over the bound) is
reported and skipped; the good lines around it are stored, many per
transaction, in the order they came.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import orjson  # this module is the bulk path's alone: a single ingest never loads it

from agentbox.errors import BadInput
from agentbox.jsonutil import Canonical, canonical_object, canonical_plain, loads_strict
from agentbox.rules.keys import check_delivery_key

if TYPE_CHECKING:
    from agentbox.ledger.store import Store

# Lines stored per transaction: large enough that a stream pays few commits (each
# one an fsync), small enough that other writers wait tens of milliseconds at most.
CHUNK = 5000
ENVELOPE_SLACK = 4096  # bytes a line may carry beyond its payload (keys, quoting)


class LineReport(NamedTuple):  # a tuple: one is made per line, in half a dataclass's time
    line: int
    outcome: str  # stored | duplicate | conflict | bad
    source: str | None = None
    source_id: str | None = None
    id: int | None = None
    error: str | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"line": self.line, "outcome": self.outcome}
        if self.outcome == "bad":
            doc["error"] = self.error
        else:
            doc.update(source=self.source, source_id=self.source_id, id=self.id)
        return doc

    def describe(self) -> str:
        if self.outcome == "bad":
            return f"line {self.line}: bad: {self.error}"
        return f"line {self.line}: {self.outcome} {self.source}/{self.source_id} (event {self.id})"


@dataclass
class IngestReport:
    """What one bulk ingest did, line by line."""

    entries: list[LineReport] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for e in self.entries if e.outcome == outcome)

    @property
    def bad(self) -> int:
        return self.count("bad")

    @property
    def conflicts(self) -> int:
        return self.count("conflict")

    def totals(self) -> dict[str, int]:
        counted = Counter(e.outcome for e in self.entries)  # one pass over the lines
        return {k: counted[k] for k in ("stored", "duplicate", "conflict", "bad")}

    def document(self) -> dict[str, Any]:
        return {**self.totals(), "lines": [e.document() for e in self.entries]}

    def summary(self) -> str:
        totals = self.totals()
        return f"{len(self.entries)} line(s): " + ", ".join(f"{n} {k}" for k, n in totals.items())


def parse_line(raw: bytes, max_payload: int) -> tuple[str, str, str]:
    """One line as (source, source_id, canonical payload), or BadInput."""
    if len(raw) > max_payload + ENVELOPE_SLACK:
        raise BadInput(f"line is over {max_payload + ENVELOPE_SLACK} bytes: the "
                       f"{max_payload}-byte payload limit plus {ENVELOPE_SLACK} for the rest")
    plain = plain_line(raw)
    if plain is None:
        source, source_id, payload = strict_line(raw)
    else:
        source, source_id, payload = plain
        check_delivery_key(source, source_id)
    size = len(payload.encode("utf-8"))
    if size > max_payload:
        raise BadInput(f"payload is {size} bytes, over the {max_payload}-byte limit")
    return source, source_id, payload


def strict_line(raw: bytes) -> tuple[str, str, Canonical]:
    """A line read the strict way: every refusal worded, the key checked before the payload."""
    doc = loads_strict(raw, "line")
    if not isinstance(doc, dict):
        raise BadInput("a line must be a JSON object with source, source_id and payload")
    unknown = set(doc) - {"source", "source_id", "payload"}
    if unknown:
        raise BadInput(f"unknown keys: {', '.join(sorted(unknown))}")
    source, source_id = doc.get("source"), doc.get("source_id")
    if not isinstance(source, str) or not isinstance(source_id, str):
        raise BadInput("source and source_id must be strings")
    check_delivery_key(source, source_id)
    return source, source_id, canonical_object(doc.get("payload", {}))


_NO_PAYLOAD: dict[str, object] = {}


def plain_line(raw: bytes) -> tuple[str, str, Canonical] | None:
    """A plain line read the fast way, as (source, source_id, canonical payload); None
    for any other line, which :func:`strict_line` then reads.

    The strict way (the standard parser, with a hook refusing duplicate keys,
    then the canonical encoding) costs most of a bulk ingest's time; orjson
    does both steps several times faster. But orjson keeps the last of a
    duplicate key without a word, and its reading of an escape or of a
    number, and its spelling of them, are not the strict way's. So it is
    trusted only with what it cannot get otherwise:

    - no backslash anywhere in the line: no string holds an escape, so each
      string orjson writes back is, byte for byte, the one in the line;
    - an envelope of exactly source, source_id (strings) and payload (an
      object), else the strict way words the refusal;
    - every colon in the line accounted for: one per key of every object,
      plus those inside strings. A key given twice, at any depth, loses its
      pair (and whatever its first value held) in orjson's reading, so the
      count of what orjson writes back comes out short;
    - a payload text that :func:`~agentbox.jsonutil.canonical_plain` takes as
      canonical (no float, no long integer, nothing beyond U+FFFF, no deep
      nesting).

    Anything else goes the strict way, and so does every line orjson refuses
    (invalid UTF-8, NaN, a trailing comma, nesting past its bounds) or reads
    otherwise (an integer past 64 bits comes out a float): its result or its
    error is then exactly what it always was.
    """
    if b"\\" in raw:
        return None
    try:
        doc = orjson.loads(raw)
        if type(doc) is not dict:
            return None
        source, source_id = doc.get("source"), doc.get("source_id")
        payload = doc.get("payload", _NO_PAYLOAD)
        if (type(source) is not str or type(source_id) is not str or type(payload) is not dict
                or len(doc) != 2 + ("payload" in doc)):
            return None
        text = canonical_plain(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS).decode())
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # e.g. nested past orjson's bound
        return None
    if text is None or raw.count(b":") != (len(doc) + source.count(":") + source_id.count(":")
                                           + text.count(":")):
        return None
    return source, source_id, text


def read_lines(stream: IO[bytes], max_payload: int) -> Iterator[bytes]:
    """The lines of ``stream``, none held in memory past the bound.

    A line longer than a payload plus its envelope may be comes out cut one
    byte past that bound (so :func:`parse_line` refuses it) and the rest of it
    is skipped without being kept.
    """
    bound = max_payload + ENVELOPE_SLACK
    while line := stream.readline(bound + 1):
        if len(line) > bound and not line.endswith(b"\n"):
            while (rest := stream.readline(65536)) and not rest.endswith(b"\n"):
                pass
        yield line


def _numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            yield number, raw


def ingest_stream(store: Store, lines: Iterable[bytes], now: int, max_payload: int,
                  chunk: int = CHUNK) -> IngestReport:
    report = IngestReport()
    pending: list[tuple[int, tuple[str, str, str]]] = []

    def flush() -> None:
        results = store.ingest_many([item for _, item in pending], now)
        report.entries.extend(
            LineReport(number, r.outcome, r.source, r.source_id, r.id)
            for (number, _), r in zip(pending, results, strict=True))
        pending.clear()

    for number, raw in _numbered(lines):
        try:
            pending.append((number, parse_line(raw, max_payload)))
        except BadInput as exc:
            flush()  # keep the report in line order
            report.entries.append(LineReport(number, "bad", error=str(exc)))
            continue
        if len(pending) >= chunk:
            flush()
    if pending:
        flush()
    return report
