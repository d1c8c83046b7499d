"""Reading JSON lines never holds more than one bounded line in memory."""

from __future__ import annotations

import io

from agentbox.jsonl import ENVELOPE_SLACK, parse_line, read_lines


def test_a_huge_line_is_cut_past_the_bound_and_the_next_line_survives() -> None:
    bound = 1000 + ENVELOPE_SLACK
    stream = io.BytesIO(b'{"source": "s", "source_id": "1"}\n'
                        + b"x" * (50 * bound) + b"\n"
                        + b'{"source": "s", "source_id": "2"}\n'
                        + b"y" * (3 * bound))  # a last line without a newline
    lines = list(read_lines(stream, 1000))
    assert [len(line) for line in lines] == [34, bound + 1, 34, bound + 1]
    assert parse_line(lines[2], 1000)[:2] == ("s", "2")
    assert all(len(line) <= bound + 1 for line in lines)


def test_lines_within_the_bound_come_out_whole() -> None:
    text = b'{"source": "s", "source_id": "1", "payload": {"k": "' + b"v" * 900 + b'"}}\n'
    assert list(read_lines(io.BytesIO(text * 3), 1000)) == [text] * 3
