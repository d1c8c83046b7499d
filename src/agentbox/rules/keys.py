"""What may key an event: the (source, source_id) pair that makes ingest idempotent."""

from __future__ import annotations

from agentbox.errors import BadInput

MAX_KEY_LENGTH = 512

# Sources agentbox writes itself: an outside delivery under one of them could
# take the key of a timer occurrence or of an approval's one outcome.
RESERVED_SOURCES = {"approval": "agentbox approve", "timer": "agentbox schedule"}


def check_key(source: str, source_id: str) -> None:
    """Refuse keys that could never be stored or looked up reliably."""
    # The common case, decided at once: ASCII keys of a sane length (the loop below
    # finds what is wrong with any other, to say so).
    if (type(source) is str and type(source_id) is str
            and 0 < len(source) <= MAX_KEY_LENGTH and 0 < len(source_id) <= MAX_KEY_LENGTH
            and source.isascii() and source_id.isascii()
            and "\x00" not in source and "\x00" not in source_id):
        return
    for name, value in (("source", source), ("source_id", source_id)):
        if not isinstance(value, str) or not value:
            raise BadInput(f"{name} must be a non-empty string")
        if len(value) > MAX_KEY_LENGTH:
            raise BadInput(f"{name} is longer than {MAX_KEY_LENGTH} characters")
        if "\x00" in value:
            raise BadInput(f"{name} contains a NUL character")
        if not value.isascii():  # ASCII is valid UTF-8: most keys skip the encode
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadInput(f"{name} is not valid UTF-8") from None


def check_delivery_key(source: str, source_id: str) -> None:
    """A key for an event delivered from outside (``agentbox ingest``, ``serve``)."""
    check_key(source, source_id)
    if source in RESERVED_SOURCES:
        raise BadInput(f"source {source!r} is kept for agentbox's own events; "
                       f"use `{RESERVED_SOURCES[source]}` instead")


def conflict_detail(payload: str) -> str:
    """What an event's story says when a different payload came under its key.

    A digest, not the payload: the refused body may be large or sensitive.
    """
    import hashlib  # only for a conflict: keeps it off the ingest start-up path

    digest = hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]
    return f"refused a different payload (sha256 {digest}…)"


def prefix_bound(prefix: str) -> str:
    """The least string above every string that starts with ``prefix`` (code point order).

    With it, "starts with" is a range on the key's index: ``prefix <= id < bound``.
    """
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def idempotency_key(prefix: str, event_id: int) -> str:
    """Stable for an event across retries and replays, unique across inboxes and
    restores (``prefix`` is its epoch's: see ``Core.event_keys``)."""
    return f"{prefix}-event-{event_id}"


def epoch_prefix(instance: str, token: str) -> str:
    """The key prefix of an epoch begun by a restore: the inbox's instance id and a
    random token, so two restores of one backup (on two machines, say) differ too."""
    return f"{instance}.{token}"
