"""Strict JSON in, canonical JSON out.

Payloads are compared as canonical JSON (sorted keys, no insignificant
whitespace), so a retried webhook whose sender reorders keys is still a
duplicate and not a conflict.

A payload may nest at most :data:`MAX_DEPTH` levels of objects and arrays.
Python's own parser gives up near a thousand, but a payload that deep only
just parses: every later step that wraps it (the batch handed to a handler,
``dead --json``, an indented ``dead show``) adds levels and fails. Real
webhooks nest a handful of levels, so the bound is checked once, on every
way in, and everything stored can be handled again.
"""

from __future__ import annotations

import json
from typing import Any

from agentbox.errors import BadInput

DEFAULT_MAX_PAYLOAD = 256 * 1024
MAX_DEPTH = 64  # levels of objects and arrays in one payload, the payload itself included


def _refuse_constant(name: str) -> Any:
    raise BadInput(f"{name} is not valid JSON")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise BadInput(f"duplicate key {key!r} in JSON object")
        obj[key] = value
    return obj


def loads_strict(text: str | bytes, what: str = "payload") -> Any:
    """Parse strict JSON: valid UTF-8, no NaN/Infinity, no duplicate keys."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"{what} is not valid UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            object_pairs_hook=_refuse_duplicate_keys,
        )
    except BadInput as exc:
        raise BadInput(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} "
                       f"column {exc.colno}") from None
    except RecursionError:
        raise BadInput(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise BadInput(f"{what} is not usable JSON: {exc}") from None


def canonical(value: Any) -> str:
    """The one spelling of a JSON value that agentbox stores and compares."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")  # lone surrogates from "\ud800" escapes end here
    except UnicodeEncodeError:
        raise BadInput("not representable as strict JSON: a string holds a lone "
                       "surrogate (\\ud800-\\udfff)") from None
    except ValueError:  # 1e400 parses as infinity; JSON has no spelling for it
        raise BadInput("not representable as strict JSON: a number is out of range "
                       "(NaN or infinite)") from None
    except RecursionError:
        raise BadInput("nested too deeply") from None
    return text


def parse_payload(raw: str | bytes, max_bytes: int = DEFAULT_MAX_PAYLOAD,
                  what: str = "payload") -> str:
    """Check a raw event payload and return its canonical form.

    The size bound applies to the raw body, before parsing, so an oversized
    body costs no parse. Text is checked as the bytes it stands for: a
    command-line argument that was not UTF-8 (its bytes carried as lone
    surrogates) is refused as such, as the same bytes from a file would be.
    """
    body = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(body) > max_bytes:
        raise BadInput(f"{what} is {len(body)} bytes, over the {max_bytes}-byte limit")
    value = loads_strict(body, what)
    return canonical_object(value, what)


def canonical_object(value: Any, what: str = "payload") -> str:
    """The canonical form of a payload: a JSON object no deeper than MAX_DEPTH."""
    if not isinstance(value, dict):
        raise BadInput(f"{what} must be a JSON object, not {type_name(value)}")
    if depth(value) > MAX_DEPTH:
        raise BadInput(f"{what} is nested more than {MAX_DEPTH} levels deep")
    try:
        return canonical(value)
    except BadInput as exc:
        raise BadInput(f"{what}: {exc}") from None


def depth(value: Any) -> int:
    """Levels of objects and arrays in ``value`` (0 for a scalar), without recursion.

    Stops counting one level past MAX_DEPTH: that is enough to refuse it.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = (item.values() if isinstance(item, dict)
                    else item if isinstance(item, list) else None)
        if children is None:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        stack.extend((child, level + 1) for child in children
                     if isinstance(child, (dict, list)))
    return deepest


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
