"""Plain lines read the fast way (orjson) come out exactly as the strict way reads them."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbox import jsonl
from agentbox.errors import BadInput
from agentbox.jsonl import parse_line, plain_line
from agentbox.jsonutil import MAX_DEPTH, Canonical

BIG = 256 * 1024


def outcome(raw: bytes, max_payload: int = BIG) -> tuple[Any, ...]:
    """What parse_line makes of a line: its parts (with the payload's type and its
    0.2 spelling) or its refusal, word for word."""
    try:
        source, source_id, payload = parse_line(raw, max_payload)
    except BadInput as exc:
        return ("bad", str(exc))
    return ("ok", source, source_id, payload, type(payload), getattr(payload, "legacy", None))


def strictly(raw: bytes, max_payload: int = BIG) -> tuple[Any, ...]:
    """The same, with every line read the strict way."""
    with mock.patch.object(jsonl, "plain_line", return_value=None):
        return outcome(raw, max_payload)


def now_and_then(usual: st.SearchStrategy[Any], unusual: st.SearchStrategy[Any],
                 one_in: int) -> st.SearchStrategy[Any]:
    """``usual`` mostly, ``unusual`` one time in ``one_in``: most lines stay plain
    enough to be read the fast way, so that what could differ is tried there."""
    # not an end of the range: Hypothesis draws those far more often
    return st.integers(1, one_in).flatmap(lambda n: unusual if n == one_in // 2 else usual)


WS = st.sampled_from(["", "", "", " ", "  ", "\t", "\n", "\r\n"])  # what JSON allows
PLAIN_TEXT = (st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs", "Cc"),
                                    exclude_characters='"\\'), max_size=10)
              | st.sampled_from(["", ":", "a:b", "::", "1.5", "v1e3", "2024-01-01T00:00:00Z",
                                 "12345678901234567", "timer", "approval"]))
ODD_TEXT = (st.text(max_size=10)
            | st.text(alphabet='ab:"\\/ é\x00\x1f\x7f\u2028\U0001f600\ud800', max_size=8)
            | st.sampled_from(["x" * 600, "\U0001f600", "\ud800"]))
STRINGS = now_and_then(PLAIN_TEXT, ODD_TEXT, 30)
NUMBERS = st.sampled_from(["0", "-0", "-0.0", "1.0", "1.5", "1E2", "1e-7", "100", "01", "1.",
                           ".5", "+1", "1e400", "NaN", "Infinity", "-Infinity",
                           "999999999999999", "1234567890123456", "9007199254740993",
                           "18446744073709551615", "18446744073709551616",
                           "-9223372036854775809", "1" + "0" * 5000])


@st.composite
def strings(draw: st.DrawFn, of: st.SearchStrategy[str] = STRINGS) -> str:
    """A JSON string as a sender may spell it: as json.dumps does, now and then
    with \\u escapes for non-ASCII, every character a \\u escape, or raw,
    quotes and controls and all."""
    text = draw(of)
    how = draw(now_and_then(st.just("utf-8"), st.sampled_from(["ascii", "raw", "escaped"]), 30))
    if how == "raw":
        return f'"{text}"'
    if how == "escaped":  # a colon among them too
        return '"' + "".join(json.dumps(c)[1:-1] if ord(c) > 0x7F else f"\\u{ord(c):04x}"
                             for c in text) + '"'
    return json.dumps(text, ensure_ascii=how == "ascii")


# From a small set now and then, so that some keys come twice.
KEYS = strings(now_and_then(STRINGS, st.sampled_from(["a", "b", "a:b", "", ":", "é"]), 3))
SCALARS = now_and_then(st.sampled_from(["null", "true", "false"]) | strings()
                       | st.integers(-(10**15) + 1, 10**15 - 1).map(str),
                       NUMBERS | st.integers().map(str) | st.floats().map(json.dumps), 20)


@st.composite
def objects(draw: st.DrawFn, values: st.SearchStrategy[str]) -> str:
    pairs = draw(st.lists(st.tuples(KEYS, values), max_size=5))
    return "{" + draw(WS) + ",".join(
        f"{draw(WS)}{key}{draw(WS)}:{draw(WS)}{value}{draw(WS)}" for key, value in pairs) + "}"


def arrays(values: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.tuples(values, WS), max_size=4).map(
        lambda items: "[" + ",".join(v + w for v, w in items) + "]")


VALUES = st.recursive(SCALARS, lambda inner: arrays(inner) | objects(inner), max_leaves=15)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """An envelope as a sender may write it: keys in any order, now and then one
    missing, twice or unknown, a value of another type, whitespace JSON does not
    allow, broken UTF-8."""
    names = strings(now_and_then(PLAIN_TEXT.filter(bool), STRINGS, 5))
    pairs = [(json.dumps(key), draw(now_and_then(usual, VALUES, 20))) for key, usual in (
        ("source", names), ("source_id", names), ("payload", objects(VALUES)))
        if draw(st.integers(0, 19)) != 10]
    if draw(st.integers(0, 19)) == 10:
        pairs.append((draw(KEYS), draw(VALUES)))
    if pairs and draw(st.integers(0, 19)) == 10:
        key, _ = draw(st.sampled_from(pairs))
        pairs.append((key, draw(VALUES)))
    pairs = draw(st.permutations(pairs))
    body = "{" + ",".join(f"{draw(WS)}{k}{draw(WS)}:{draw(WS)}{v}{draw(WS)}"
                          for k, v in pairs) + "}" + draw(st.sampled_from(["", "\n", "\r\n"]))
    if draw(st.integers(0, 29)) == 15:
        body = body.replace(" ", draw(st.sampled_from(["\x0c", "\x0b", "\xa0"])), 1)
    raw = body.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 29)) == 15:
        raw = raw.replace(b"a", b"\xff", 1)
    return raw


@settings(max_examples=600, deadline=None)  # a busy machine must not flake
@given(lines(), st.sampled_from([16, 64, BIG]))
def test_any_line_comes_out_as_the_strict_way_reads_it(raw: bytes, max_payload: int) -> None:
    assert outcome(raw, max_payload) == strictly(raw, max_payload)


# Plain envelopes: no escape, no float, no long integer, nothing beyond U+FFFF.
PLAIN_TEXT = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs", "Cc"),
                                   exclude_characters='"\\'), max_size=10)
PLAIN_SCALARS = (st.sampled_from(["null", "true", "false", "-0"])
                 | st.integers(-(10**15) + 1, 10**15 - 1).map(str)
                 | PLAIN_TEXT.map(lambda s: f'"{s}"'))
PLAIN_VALUES = st.recursive(PLAIN_SCALARS, lambda inner: st.lists(inner, max_size=4).map(
    lambda items: "[" + ",".join(items) + "]") | st.dictionaries(
    PLAIN_TEXT, inner, max_size=4).map(
    lambda d: "{" + ",".join(f'"{k}" : {v}' for k, v in d.items()) + "}"), max_leaves=15)
PLAIN_KEYS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E,
                                   exclude_characters='"\\'), min_size=1, max_size=20)


@settings(max_examples=300, deadline=None)
@given(PLAIN_KEYS, PLAIN_KEYS, PLAIN_VALUES.filter(lambda v: v.startswith("{")), st.booleans())
def test_a_plain_line_is_read_the_fast_way_and_as_the_strict_way_reads_it(
        source: str, source_id: str, payload: str, spaced: bool) -> None:
    sep = ", " if spaced else ","
    raw = (f'{{"source":{json.dumps(source)}{sep}"source_id":{json.dumps(source_id)}{sep}'
           f'"payload":{payload}}}\n').encode()
    assert plain_line(raw) is not None
    assert outcome(raw) == strictly(raw)


def envelope(payload: str, source: str = "gh", source_id: str = "1") -> bytes:
    return f'{{"source": "{source}", "source_id": "{source_id}", "payload": {payload}}}'.encode()


@pytest.mark.parametrize("raw", [
    envelope('{"url": "http://h:80/a", "at": "12:00:00", "k:v": {"a:b": ["c:d"]}}',
             source="urn:gh", source_id="x:1"),
    envelope('{"v": "1.5", "sha": "9e3f1", "n": 999999999999999, "m": -0}'),
    envelope('{"é": "ü€\uffff", "a": [true, false, null]}'),
    envelope('{"flat": [' + ",".join(["[]"] * 70) + "]}"),  # many brackets, 2 deep
    b'{"source_id": "1", "source": "gh"}\r\n',  # no payload: {}
])
def test_plain_lines_go_the_fast_way(raw: bytes) -> None:
    fast = plain_line(raw)
    assert fast is not None and type(fast[2]) is Canonical and fast[2].legacy is None
    assert outcome(raw) == strictly(raw)


@pytest.mark.parametrize(("raw", "said"), [
    # an escape anywhere
    (envelope('{"q": "\\u00e9"}'), None),
    (envelope('{"q": "a\\"b"}'), None),
    # what orjson refuses
    (b'{"source": "gh",', "line is not valid JSON"),
    (envelope('{"n": NaN}'), "NaN is not valid JSON"),
    (b'{"source": "gh", "source_id": "1", "payload": {"s": "\xff"}}', "not valid UTF-8"),
    (b'\xef\xbb\xbf{"source": "gh", "source_id": "1"}', "line is not valid JSON"),
    (envelope('{"a": [1,]}'), "line is not valid JSON"),
    # the envelope, worded the strict way
    (b"[]", "a line must be a JSON object"),
    (b'{"source": 1, "source_id": "1"}', "source and source_id must be strings"),
    (b'{"source": "gh"}', "source and source_id must be strings"),
    (envelope("[]"), "payload must be a JSON object, not an array"),
    (b'{"source": "gh", "source_id": "1", "x": {}}', "unknown keys: x"),
    # numbers JCS spells otherwise, and characters it sorts otherwise
    (envelope('{"n": 1.50}'), None),
    (envelope('{"n": 1E2}'), None),
    (envelope('{"n": 1234567890123456}'), None),
    (envelope('{"n": 18446744073709551616}'), "beyond ±(2**53 - 1)"),  # orjson: a float
    (envelope('{"\U0001f600": 1, "\ue000": 2}'), None),
    # nesting past the bound, and past orjson's own
    (envelope('{"a":' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"),
     f"nested more than {MAX_DEPTH} levels"),
    (envelope("{\"a\":" + "[" * 300 + "]" * 300 + "}"), f"nested more than {MAX_DEPTH} levels"),
    # a key given twice, which orjson takes the last of without a word
    (b'{"source": "gh", "source": "gh", "source_id": "1"}', "duplicate key 'source'"),
    (envelope("{}")[:-1] + b', "payload": {}}', "duplicate key 'payload'"),
    (envelope('{"a":1, "a" :2}'), "duplicate key 'a'"),
    (envelope('{"x": {"k": 1, "k": 1}}'), "duplicate key 'k'"),
    (envelope('{"k": "a:b", "k": "c:d"}'), "duplicate key 'k'"),
    (envelope('{"k": {"a:b": ":"}, "k": "c"}'), "duplicate key 'k'"),
    (envelope('{"k": 1, "k": "::::"}'), "duplicate key 'k'"),
    (envelope('{"a:": 1, "a:": 2}', source="a::", source_id=":"), "duplicate key 'a:'"),
    # ... its colon made up for by an escaped one
    (envelope('{"k": 1, "k": "\\u003a"}'), "duplicate key 'k'"),
])
def test_every_other_line_goes_the_strict_way(raw: bytes, said: str | None) -> None:
    assert plain_line(raw) is None
    strict = strictly(raw)
    assert outcome(raw) == strict
    if said is None:
        assert strict[0] == "ok"
    else:
        assert strict[0] == "bad" and said in strict[1]


@pytest.mark.parametrize(("raw", "max_payload", "said"), [
    (b'{"source": "timer", "source_id": "1", "payload": {"a": 1}}', BIG,
     "source 'timer' is kept for agentbox's own events"),
    (b'{"source": "", "source_id": "1"}', BIG, "source must be a non-empty string"),
    (b'{"source": "gh", "source_id": "' + b"x" * 513 + b'"}', BIG,
     "source_id is longer than 512 characters"),
    (envelope('{"text": "' + "y" * 100 + '"}'), 100,
     "payload is 111 bytes, over the 100-byte limit"),
])
def test_a_plain_line_is_refused_for_its_key_or_size_as_the_strict_way_does(
        raw: bytes, max_payload: int, said: str) -> None:
    assert plain_line(raw) is not None
    fast = outcome(raw, max_payload)
    assert fast == strictly(raw, max_payload)
    assert fast[0] == "bad" and said in fast[1]


@pytest.mark.parametrize("text", [
    '{"a":"\\n"}',  # an escape: strings could differ
    '{"a":1.5}',  # a number JCS spells otherwise
    '{"a":1234567890123456}',
    '{"\U0001f600":1,"\ue000":2}',  # keys JCS sorts otherwise
    '{"a":' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}",  # nested past the bound
])
def test_canonical_plain_declines_what_canonical_object_could_spell_otherwise(
        text: str) -> None:
    from agentbox.jsonutil import canonical_plain

    assert canonical_plain(text) is None


def test_canonical_plain_takes_a_plain_text_as_canonical_object_gives_it() -> None:
    from agentbox.jsonutil import canonical_object, canonical_plain

    text = '{"a":[' + ",".join(["{}"] * 70) + '],"b":"1.5 at 12:00","c":-3,"d":"é€"}'
    made = canonical_plain(text)
    assert type(made) is Canonical and made.legacy is None
    assert made == canonical_object(json.loads(text)) == text
