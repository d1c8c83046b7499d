"""Storage backends: each stores, locks and queries; the rules live in agentbox.rules."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from agentbox.rules.keys import check_key

INGEST_CHUNK = 1000  # rows per transaction in bulk ingest

Item = tuple[str, str, str]  # (source, source_id, canonical payload)


def checked_chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Bulk-ingest items in lists of ``size``, each key checked before its list is handed out.

    Lazy, as a stream is: the chunks before a bad key are stored before it is seen.
    """
    chunk: list[Item] = []
    for source, source_id, payload in items:
        check_key(source, source_id)
        chunk.append((source, source_id, payload))
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
