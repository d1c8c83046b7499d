"""Strict JSON in, canonical JSON out (rule 1's comparison)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbox.errors import BadInput
from agentbox.jsonutil import (
    DEFAULT_MAX_PAYLOAD,
    canonical,
    canonical_object,
    loads_strict,
    parse_payload,
    type_name,
)

SAFE = 2**53 - 1  # the integers JSON numbers carry exactly (RFC 8785, I-JSON)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-SAFE, SAFE)
    # JCS writes an integral float of 2**53 or more (below 1e21) as an integer, which
    # agentbox then refuses as rfc8785 does: such a payload is no fixed point
    | st.floats(allow_nan=False, allow_infinity=False).filter(
        lambda f: abs(f) < 2**53 or abs(f) >= 1e21 or not f.is_integer())
    | st.text(alphabet=st.characters(exclude_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=60, deadline=None)  # a busy machine must not flake
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.integers())
def test_reordered_and_respaced_objects_share_one_canonical_form(obj: dict[str, Any],
                                                                 seed: int) -> None:
    rng = random.Random(seed)
    spaced = json.dumps(_shuffled(obj, rng), indent=rng.choice([None, 1, 4]),
                        ensure_ascii=rng.choice([True, False]))
    assert parse_payload(spaced, 10**9) == parse_payload(json.dumps(obj), 10**9)
    # and the canonical form is a fixed point
    once = parse_payload(spaced, 10**9)
    assert parse_payload(once, 10**9) == once


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_the_canonical_form_is_rfc8785_s_whichever_encoder_writes_it(obj: dict[str, Any]) -> None:
    import rfc8785

    assert canonical(obj) == rfc8785.dumps(obj).decode("utf-8")


def test_keys_beyond_the_basic_plane_sort_by_utf16_code_units() -> None:
    assert canonical({"\U0001f600": 1, "\ue000": 2}) == '{"\U0001f600":1,"\ue000":2}'
    assert canonical({"a": 1.5, "b": 9 * 10**15}) == '{"a":1.5,"b":9000000000000000}'


def test_canonical_spelling() -> None:
    assert canonical({"b": 1, "a": [1, {"d": None, "c": True}]}) == (
        '{"a":[1,{"c":true,"d":null}],"b":1}')
    assert canonical({"é": "☃"}) == '{"é":"☃"}'  # text, not \\u escapes


def test_different_values_stay_different() -> None:
    assert parse_payload('{"a": 1}') != parse_payload('{"a": "1"}')
    assert parse_payload('{"a": [1, 2]}') != parse_payload('{"a": [2, 1]}')


@pytest.mark.parametrize(("text", "needle"), [
    ("NaN", "NaN"), ('{"a": -Infinity}', "Infinity"), ('{"a": 1e999}', "out of range"),
    ("{", "not valid JSON"), ('{"a": 1} x', "not valid JSON"), ("", "not valid JSON"),
    ('{"k": 1, "k": 1}', "duplicate key 'k'"), ('{"a": "\\udc00"}', "surrogate"),
    ("[" * 50_000 + "]" * 50_000, "nested more than 64 levels deep"),
    ('{"n": ' + "9" * 4301 + "}", "digits"),
])
def test_refusals(text: str, needle: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_payload(text, 10**9)
    assert needle in str(caught.value)


def test_invalid_utf8_bytes_name_the_byte() -> None:
    with pytest.raises(BadInput, match=r"not valid UTF-8 \(byte 6\)"):
        loads_strict(b'{"a": \xff}')


def test_size_bound_counts_raw_bytes_before_parsing() -> None:
    body = '{"s":"' + "é" * 10 + '"}'  # 10 characters, 20 bytes
    assert parse_payload(body, len(body.encode())) == '{"s":"' + "é" * 10 + '"}'
    with pytest.raises(BadInput, match=f"{len(body.encode())} bytes, over the"):
        parse_payload(body, len(body.encode()) - 1)
    # an oversized body is refused even when it is not JSON at all
    with pytest.raises(BadInput, match="over the 4-byte limit"):
        parse_payload(b"\xff" * 5, 4)
    assert DEFAULT_MAX_PAYLOAD == 262_144


@pytest.mark.parametrize(("value", "name"), [
    (None, "null"), (True, "a boolean"), (1, "a number"), (1.5, "a number"), ("s", "a string"),
    ([], "an array"), ({}, "an object"),
])
def test_type_names(value: Any, name: str) -> None:
    assert type_name(value) == name
    if not isinstance(value, dict):
        with pytest.raises(BadInput, match=f"must be a JSON object, not {name}"):
            canonical_object(value)


def test_what_names_the_input_in_messages() -> None:
    with pytest.raises(BadInput, match=r"^line is not valid JSON"):
        loads_strict("{", "line")
    with pytest.raises(BadInput, match=r"^body: "):
        canonical_object({"x": float("inf")}, "body")


@pytest.mark.parametrize(("value", "levels"), [
    (1, 0), ({}, 1), ([], 1), ({"a": 1, "b": "x"}, 1), ({"a": []}, 2), ([{}, [[{}]]], 4),
    ({"a": {"b": {"c": {}}}, "d": [1]}, 4), ({"[{": "}]]]", "b": ['"[', "\\"]}, 2),
    ({"a\\\"[": [{"x": "\\"}]}, 3),
])
def test_depth_counts_levels_of_objects_and_arrays(value: Any, levels: int) -> None:
    from agentbox.jsonutil import text_depth

    assert text_depth(canonical(value)) == levels


def test_canonical_object_refuses_one_level_past_the_bound() -> None:
    from agentbox.jsonutil import MAX_DEPTH, text_depth

    value: Any = {}
    for level in range(MAX_DEPTH - 1):  # objects and arrays in turn, MAX_DEPTH levels
        value = [value] if level % 2 else {"k": value}
    assert text_depth(canonical(value)) == MAX_DEPTH
    assert canonical_object(value) == canonical(value)
    with pytest.raises(BadInput, match=f"nested more than {MAX_DEPTH} levels"):
        canonical_object({"over": value})


def _levels(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_levels, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_levels, value), default=0)
    return 0


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-SAFE, SAFE) | st.text(),
                     lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                     max_leaves=30)


@given(_JSON)
def test_text_depth_agrees_with_walking_the_value(value: Any) -> None:
    from agentbox.jsonutil import text_depth

    assert text_depth(canonical(value)) == _levels(value)
