"""`agentbox ingest --jsonl`: many events per transaction, a report per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli


def line(source: str, source_id: str, payload: Any) -> str:
    return json.dumps({"source": source, "source_id": source_id, "payload": payload})


def test_per_line_report_bad_line_reported_good_lines_stored(cli: Cli, rows: Any) -> None:
    stream = "\n".join([
        line("gh", "1", {"n": 1}),
        "this is not json",
        line("gh", "2", {"n": 2}),
        "",
        '{"source": "gh", "source_id": "3", "payload": {"n": NaN}}',
        line("gh", "1", {"n": 1}),
        '{"source": "gh", "source_id": "4", "payload": [1]}',
        '{"source": "gh", "payload": {}}',
        line("gh", "5", {"n": 5}),
    ]) + "\n"
    result = cli("ingest", "--jsonl", "-", "--json", stdin=stream, now=T0)
    assert result.code == 65
    doc = json.loads(result.out)
    assert {k: doc[k] for k in ("stored", "duplicate", "conflict", "bad")} == {
        "stored": 3, "duplicate": 1, "conflict": 0, "bad": 4}
    outcomes = [(e["line"], e["outcome"]) for e in doc["lines"]]
    assert outcomes == [(1, "stored"), (2, "bad"), (3, "stored"), (5, "bad"),
                        (6, "duplicate"), (7, "bad"), (8, "bad"), (9, "stored")]
    assert doc["lines"][0] == {"line": 1, "outcome": "stored", "source": "gh",
                               "source_id": "1", "id": 1}
    assert "NaN" in doc["lines"][3]["error"]
    assert "JSON object" in doc["lines"][5]["error"]
    assert "source_id" in doc["lines"][6]["error"]
    assert rows("SELECT source_id, payload FROM events ORDER BY id") == [
        ("1", '{"n":1}'), ("2", '{"n":2}'), ("5", '{"n":5}')]


def test_conflict_without_bad_lines_exits_3(cli: Cli, rows: Any) -> None:
    stream = "\n".join([line("a", "1", {"v": 1}), line("a", "2", {}),
                        line("a", "1", {"v": 2})])
    result = cli("ingest", "--jsonl", "-", stdin=stream, now=T0)
    assert result.code == 3
    assert result.out.splitlines() == ["line 1: stored a/1 (event 1)",
                                       "line 2: stored a/2 (event 2)",
                                       "line 3: conflict a/1 (event 1)"]
    assert result.err == "agentbox: 3 line(s): 2 stored, 0 duplicate, 1 conflict, 0 bad\n"
    assert rows("SELECT payload FROM events WHERE source_id = '1'") == [('{"v":1}',)]


def test_all_good_exits_0_and_duplicates_are_success(cli: Cli, tmp_path: Path) -> None:
    stream = tmp_path / "events.jsonl"
    stream.write_text("\n".join([line("a", "1", {"x": [1, 2]}),
                                 '{"payload": {"x": [1,2]}, "source_id": "1", "source": "a"}',
                                 line("a", "2", {})]) + "\r\n")
    result = cli("ingest", "--jsonl", str(stream), "--json", now=T0)
    assert result.code == 0
    doc = json.loads(result.out)
    assert [e["outcome"] for e in doc["lines"]] == ["stored", "duplicate", "stored"]


def test_bad_takes_precedence_over_conflict(cli: Cli) -> None:
    stream = "\n".join([line("a", "1", {"v": 1}), line("a", "1", {"v": 2}), "{"])
    assert cli("ingest", "--jsonl", "-", stdin=stream, now=T0).code == 65


def test_invalid_utf8_and_oversized_lines_are_bad_lines(cli: Cli, rows: Any) -> None:
    assert cli("config", "set", "max_payload", "100").code == 0
    stream = b"\n".join([
        b'{"source": "a", "source_id": "1", "payload": {"t": "\xff"}}',
        line("a", "2", {"t": "x" * 200}).encode(),
        line("a", "3", {"t": "fits"}).encode(),
        line("a", "4", {"t": "x" * 10_000}).encode(),
    ])
    result = cli("ingest", "--jsonl", "-", "--json", stdin=stream, now=T0)
    assert result.code == 65
    lines = json.loads(result.out)["lines"]
    assert [e["outcome"] for e in lines] == ["bad", "bad", "stored", "bad"]
    assert "UTF-8" in lines[0]["error"]
    assert "100-byte limit" in lines[1]["error"] and "100-byte" in lines[3]["error"]
    assert rows("SELECT source_id FROM events") == [("3",)]


def test_unknown_keys_and_non_string_keys_are_bad(cli: Cli) -> None:
    stream = "\n".join(['{"source": "a", "source_id": "1", "extra": 1}',
                        '{"source": "a", "source_id": 7}',
                        '{"source": "", "source_id": "1"}'])
    result = cli("ingest", "--jsonl", "-", "--json", stdin=stream, now=T0)
    lines = json.loads(result.out)["lines"]
    assert [e["outcome"] for e in lines] == ["bad", "bad", "bad"]
    assert "extra" in lines[0]["error"]
    assert "strings" in lines[1]["error"]
    assert "non-empty" in lines[2]["error"]


def test_empty_stream_is_nothing_to_do(cli: Cli) -> None:
    result = cli("ingest", "--jsonl", "-", "--json", stdin="", now=T0)
    assert result.code == 0
    assert json.loads(result.out) == {"stored": 0, "duplicate": 0, "conflict": 0, "bad": 0,
                                      "lines": []}


def test_missing_jsonl_file_is_65(cli: Cli, tmp_path: Path, one_error: Any) -> None:
    result = cli("ingest", "--jsonl", str(tmp_path / "nope.jsonl"), now=T0)
    assert result.code == 65
    assert "cannot read" in one_error(result.err)


def test_stream_larger_than_one_chunk(cli: Cli, rows: Any) -> None:
    from agentbox.jsonl import CHUNK

    total = 2 * CHUNK + CHUNK // 2
    good = [line("bulk", f"k{i}", {"i": i}) for i in range(total)]
    # a bad line in the middle of the second chunk and duplicates at the end
    good.insert(CHUNK + CHUNK // 2, "not json")
    stream = "\n".join([*good, *good[:10]]) + "\n"
    result = cli("ingest", "--jsonl", "-", "--json", stdin=stream, now=T0)
    assert result.code == 65
    doc = json.loads(result.out)
    assert (doc["stored"], doc["duplicate"], doc["bad"]) == (total, 10, 1)
    assert len(doc["lines"]) == total + 11
    assert [e["line"] for e in doc["lines"]] == list(range(1, total + 12))
    assert rows("SELECT COUNT(*), COUNT(DISTINCT source_id) FROM events") == [
        (total, total)]
    # every stored line's reported id is the row that holds it
    stored = {e["source_id"]: e["id"] for e in doc["lines"] if e["outcome"] == "stored"}
    rows = dict(rows("SELECT source_id, id FROM events"))
    assert stored == rows


@pytest.mark.slow
def test_stream_from_a_real_process(agentbox_proc: Any, rows: Any) -> None:
    stream = "\n".join(line("p", str(i), {"i": i}) for i in range(2_500)) + "\n"
    done = agentbox_proc("ingest", "--jsonl", "-", stdin=stream,
                         env={"AGENTBOX_NOW": str(T0)})
    assert done.returncode == 0, done.stderr
    assert done.stderr == "agentbox: 2500 line(s): 2500 stored, 0 duplicate, 0 conflict, 0 bad\n"
    assert rows("SELECT COUNT(*) FROM events") == [(2_500,)]
