"""One way in for deliveries from outside: `ingest`, `ingest --jsonl` and `serve`.

Every delivery passes the same steps in the same order, so each rule lives in
one place whatever carried the delivery:

1. the signature, when one is required, is checked over the raw bytes as
   they are read (a :class:`agentbox.signatures.Check`), before anything is
   parsed or stored;
2. the body is read up to its bound and refused past it, never held whole
   beyond it;
3. it must parse as strict JSON (valid UTF-8, no NaN, no duplicate keys)
   and be an object at most ``MAX_DEPTH`` levels deep;
4. the key is checked (an id given apart before the body is parsed, one
   found in the body after), and the sources agentbox writes itself are refused;
5. the canonical payload is stored, once.

The front ends (the CLI and the HTTP server) only carry bytes here and turn
what comes back, or the error raised, into an exit code or a status.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from agentbox.errors import BadInput

if TYPE_CHECKING:
    from agentbox.groupcommit import GroupCommit
    from agentbox.jsonl import IngestReport
    from agentbox.ledger.store import Store
    from agentbox.rules.records import IngestResult
    from agentbox.signatures import Check

CHUNK = 64 * 1024


def check_key(source: str, source_id: str) -> None:
    """Refuse a key no delivery may use: malformed, or one of agentbox's own sources."""
    from agentbox.rules.keys import check_delivery_key

    check_delivery_key(source, source_id)


def is_reserved(source: str) -> bool:
    """A source agentbox writes itself (timers, approvals): never open to deliveries."""
    from agentbox.rules.keys import RESERVED_SOURCES

    return source in RESERVED_SOURCES


def read_bounded(stream: IO[bytes], limit: int, what: str = "payload") -> bytes:
    """A whole body from ``stream``, refused once it passes ``limit`` bytes.

    At most ``limit`` + 1 bytes are ever read: an oversized body is refused
    without being held in memory whole.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = stream.read(min(CHUNK, limit + 1 - size))
        except OSError as exc:
            raise BadInput(f"cannot read the {what}: {exc.strerror or exc}") from None
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise BadInput(f"{what} is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


# A delivery's id: given apart from the body, or found in the parsed body by a function
# (which raises BadInput when it is not there).
SourceId = str | Callable[[dict[str, Any]], str]


def admit(source: str, source_id: SourceId, body: bytes, max_payload: int,
          check: Check | None = None) -> tuple[str, str]:
    """The id and canonical payload of one delivery whose raw body is ``body``, or an error.

    ``check`` is a signature not yet fed the body; it is verified first, so a
    forged delivery learns nothing about what the payload rules would say,
    nor whether its id is there.
    """
    from agentbox.jsonutil import canonical_object, loads_strict, parse_payload

    if check is not None:
        check.update(body)
        check.verify()
    if isinstance(source_id, str):
        check_key(source, source_id)
        return source_id, parse_payload(body, max_payload)
    if len(body) > max_payload:
        raise BadInput(f"payload is {len(body)} bytes, over the {max_payload}-byte limit")
    value = loads_strict(body)
    payload = canonical_object(value)
    found = source_id(value)
    check_key(source, found)
    return found, payload


def accept(store: Callable[[], Store], source: str, source_id: SourceId, body: bytes, *,
           max_payload: int, now: int, check: Check | None = None,
           commit: GroupCommit | None = None) -> IngestResult:
    """Check one delivery and store it: stored, duplicate or conflict.

    ``store`` is called only once the delivery passed every check, so a
    refused one never opens (or creates) an inbox. ``commit``, if given, commits
    the write in a group with other threads' (a server's).
    """
    found, payload = admit(source, source_id, body, max_payload, check)
    if commit is None:
        return store().ingest(source, found, payload, now)
    return commit.run(store(), lambda s: s.ingest(source, found, payload, now))


def accept_lines(store: Callable[[], Store], stream: IO[bytes], *, max_payload: int, now: int,
                 check: Check | None = None) -> IngestReport:
    """Check and store a JSON-lines stream; every line is reported.

    With a signature the whole stream must be checked before any line is
    stored, so it is spooled to a temporary file while the HMAC is computed:
    memory stays flat however long the stream is.
    """
    from agentbox.jsonl import ingest_stream, read_lines

    with contextlib.ExitStack() as stack:
        if check is not None:
            stream = stack.enter_context(_verified_copy(stream, check))
        return ingest_stream(store(), read_lines(stream, max_payload), now, max_payload)


@contextlib.contextmanager
def _verified_copy(stream: IO[bytes], check: Check) -> Iterator[IO[bytes]]:
    """``stream`` copied to a temporary file, yielded from its start once ``check`` passes."""
    import tempfile

    from agentbox.errors import AgentboxError

    with tempfile.TemporaryFile(prefix="agentbox-") as spool:
        while True:
            try:
                chunk = stream.read(CHUNK)
            except OSError as exc:
                raise BadInput(f"cannot read the stream: {exc.strerror or exc}") from None
            if not chunk:
                break
            check.update(chunk)
            try:
                spool.write(chunk)
            except OSError as exc:  # a full disk is not the sender's fault: exit 1
                raise AgentboxError(f"cannot spool the stream to check its signature: "
                                    f"{exc.strerror or exc}") from None
        check.verify()
        spool.seek(0)
        yield spool
