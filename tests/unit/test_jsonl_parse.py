"""JSON-lines parsing and the per-line report, against a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.errors import BadInput
from agentbox.jsonl import ENVELOPE_SLACK, IngestReport, ingest_stream, parse_line
from agentbox.ledger.store import Store
from support.clock import T0
from support.sqlite import sqlite_store


def test_parse_line_canonicalises_the_payload() -> None:
    raw = b'{"payload": {"b": 1, "a": 2}, "source_id": "7", "source": "gh"}\r\n'
    assert parse_line(raw, 1000) == ("gh", "7", '{"a":2,"b":1}')
    assert parse_line(b'{"source": "gh", "source_id": "8"}', 1000) == ("gh", "8", "{}")


@pytest.mark.parametrize(("raw", "needle"), [
    (b"[]", "JSON object with source"),
    (b'{"source": "a", "source_id": "1", "x": 1}', "unknown keys: x"),
    (b'{"source": 1, "source_id": "1"}', "must be strings"),
    (b'{"source": "a", "source_id": "1", "payload": "{}"}', "must be a JSON object"),
    (b'{"source": "a", "source_id": "1", "payload": {"x": "' + b"y" * 200 + b'"}}',
     "100-byte limit"),
    (b'{"source": "a", "source_id": "1", "payload": {}}' + b" " * (100 + ENVELOPE_SLACK),
     "100-byte payload limit"),
    (b'{"source": "a\\u0000", "source_id": "1"}', "NUL"),
])
def test_bad_lines(raw: bytes, needle: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_line(raw, 100)
    assert needle in str(caught.value)


def test_report_keeps_line_order_across_chunks(store: Store) -> None:
    lines = [f'{{"source": "s", "source_id": "{i}"}}\n'.encode() for i in range(10)]
    lines[4] = b"oops\n"
    lines.insert(7, b"   \n")  # blank lines are skipped but still counted
    report = ingest_stream(store, lines, T0, 1000, chunk=3)
    assert [(e.line, e.outcome) for e in report.entries] == [
        (1, "stored"), (2, "stored"), (3, "stored"), (4, "stored"), (5, "bad"),
        (6, "stored"), (7, "stored"), (9, "stored"), (10, "stored"), (11, "stored")]
    assert report.totals() == {"stored": 9, "duplicate": 0, "conflict": 0, "bad": 1}
    assert report.summary() == "10 line(s): 9 stored, 0 duplicate, 0 conflict, 1 bad"
    again = ingest_stream(store, [lines[0], b'{"source": "s", "source_id": "1", '
                                             b'"payload": {"v": 2}}'], T0, 1000)
    assert [e.outcome for e in again.entries] == ["duplicate", "conflict"]
    assert again.entries[1].describe() == "line 2: conflict s/1 (event 2)"


def test_report_documents() -> None:
    report = IngestReport()
    assert report.document() == {"stored": 0, "duplicate": 0, "conflict": 0, "bad": 0,
                                 "lines": []}


def test_a_stream_of_2500_lines_is_stored_whole(tmp_path: Path) -> None:
    with sqlite_store(tmp_path / "x.sqlite3") as store:
        lines = (f'{{"source": "s", "source_id": "{i}"}}\n'.encode() for i in range(2_500))
        report = ingest_stream(store, lines, T0, 1000)
        assert report.totals()["stored"] == 2_500
        assert store.status().events["pending"] == 2_500
