"""Strict JSON in, canonical JSON out.

Payloads are compared in the JSON Canonicalization Scheme (RFC 8785, JCS):
sorted keys, no insignificant whitespace, and each number in the one spelling
ECMAScript gives it, so a retried webhook whose sender reorders keys or spells
``1.0`` as ``1`` (or ``1e2`` as ``100``) is still a duplicate and not a
conflict. The maintained ``rfc8785`` package writes that form; it is pure
Python, several times slower than the C encoder, so it is loaded and used only
for a payload where the two could differ: one with a fraction or an exponent,
an integer of 16 digits or more, or a character beyond U+FFFF (JCS sorts keys
by UTF-16 code units, Python by code points). For every other payload
``json.dumps`` with sorted keys writes the same bytes. As ``rfc8785`` does, an
integer beyond ±(2**53 - 1), which JSON numbers cannot carry exactly, is
refused (send it as a string); a float is written as ECMAScript writes it
(``1e+300``, ``5e-324``).

A payload may nest at most :data:`MAX_DEPTH` levels of objects and arrays.
Python's own parser gives up near a thousand, but a payload that deep only
just parses: every later step that wraps it (the batch handed to a handler,
``dead --json``, an indented ``dead show``) adds levels and fails. Real
webhooks nest a handful of levels, so the bound is checked once, on every
way in, and everything stored can be handled again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agentbox.errors import BadInput

DEFAULT_MAX_PAYLOAD = 256 * 1024
MAX_DEPTH = 64  # levels of objects and arrays in one payload, the payload itself included


def _jcs(value: Any) -> str:
    """RFC 8785's form, by the ``rfc8785`` package (loaded here: most payloads never
    need it, and an ingest's start-up is measured)."""
    import rfc8785

    try:
        return rfc8785.dumps(value).decode("utf-8")
    except rfc8785.IntegerDomainError:
        raise BadInput("not representable as canonical JSON: an integer is beyond "
                       "±(2**53 - 1), which JSON numbers cannot carry exactly; send it as "
                       "a string") from None
    except rfc8785.FloatDomainError:
        raise ValueError("a number is out of range") from None


def _refuse_constant(name: str) -> Any:
    raise BadInput(f"{name} is not valid JSON")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: find the key to name it
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadInput(f"duplicate key {key!r} in JSON object")
            seen.add(key)
    return obj


# One decoder for every parse: json.loads() with hooks builds a new one per call.
_STRICT = json.JSONDecoder(parse_constant=_refuse_constant,
                           object_pairs_hook=_refuse_duplicate_keys)


def loads_strict(text: str | bytes, what: str = "payload") -> Any:
    """Parse strict JSON: valid UTF-8, no NaN/Infinity, no duplicate keys."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"{what} is not valid UTF-8 (byte {exc.start})") from None
    try:
        return _STRICT.decode(text)
    except BadInput as exc:
        raise BadInput(f"{what}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} "
                       f"column {exc.colno}") from None
    except RecursionError:
        raise BadInput(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise BadInput(f"{what} is not usable JSON: {exc}") from None


# What, outside strings, only a number that JCS spells otherwise holds: a fraction, an
# exponent or sixteen digits. One leading class, so that re skips to each digit fast
# (written as two alternatives it tries both at every character: 8 times slower).
_NOT_PLAIN = re.compile(r"[0-9](?:[.eE]|[0-9]{15})")
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")


# One encoder for every payload: json.dumps() with options builds a new one per call.
_LEGACY = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)


def legacy_canonical(value: Any) -> str:
    """The spelling agentbox 0.2 stored (sorted keys, Python's numbers): what a
    payload stored or remembered before JCS is compared by."""
    return _LEGACY.encode(value)


def canonical(value: Any) -> str:
    """The one spelling of a JSON value that agentbox stores and compares (JCS)."""
    return _spellings(value)[0]


def _jcs_may_differ(text: str) -> bool:
    """Whether JCS could spell the value ``legacy_canonical`` wrote as ``text`` otherwise:
    a number with a fraction, an exponent or sixteen digits, or a character beyond U+FFFF."""
    # Strings are taken out only when something in the text looks like such a
    # number: most payloads have none, and the search alone is cheap.
    return bool((_NOT_PLAIN.search(text) and _NOT_PLAIN.search(_STRINGS.sub("", text)))
                or (not text.isascii() and _BEYOND_BMP.search(text)))


def _spellings(value: Any) -> tuple[str, str | None]:
    """(JCS, the 0.2 spelling where that differs)."""
    try:
        text = legacy_canonical(value)
        text.encode("utf-8")  # lone surrogates from "\ud800" escapes end here
        old = None
        if _jcs_may_differ(text):
            text, old = _jcs(value), text
    except UnicodeEncodeError:
        raise BadInput("not representable as strict JSON: a string holds a lone "
                       "surrogate (\\ud800-\\udfff)") from None
    except ValueError:  # 1e400 parses as infinity; JSON has no spelling for it
        raise BadInput("not representable as strict JSON: a number is out of range "
                       "(NaN or infinite)") from None
    except RecursionError:
        raise BadInput("nested too deeply") from None
    return text, (old if old != text else None)


class Canonical(str):
    """A payload that passed every check, in its canonical spelling.

    Made only by :func:`canonical_object` (and :func:`canonical_plain`, for the
    text it would give): a store given one stores it as it is, instead of
    parsing and checking it a second time. Where agentbox 0.2
    spelled it otherwise, ``legacy`` is that spelling (a key pruned by 0.2 is
    remembered by the digest of it).
    """

    legacy: str | None = None


def parse_payload(raw: str | bytes, max_bytes: int = DEFAULT_MAX_PAYLOAD,
                  what: str = "payload") -> Canonical:
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


def canonical_object(value: Any, what: str = "payload") -> Canonical:
    """The canonical form of a payload: a JSON object no deeper than MAX_DEPTH."""
    if not isinstance(value, dict):
        raise BadInput(f"{what} must be a JSON object, not {type_name(value)}")
    try:
        text, old = _spellings(value)
    except BadInput as exc:
        raise BadInput(f"{what}: {exc}") from None
    if _too_deep(text):
        raise BadInput(f"{what} is nested more than {MAX_DEPTH} levels deep")
    made = Canonical(text)
    if old is not None:
        made.legacy = old
    return made


def canonical_plain(text: str) -> Canonical | None:
    """``text`` as :func:`canonical_object` gives it, or None where that could differ.

    ``text`` is an object spelled with its keys sorted by code point and no
    whitespace, decoded from UTF-8, as a fast encoder writes it (orjson with
    sorted keys, in the bulk path). Where it holds no escape (no backslash:
    no string holds a quote or a control character), no number that JCS
    spells otherwise, no character beyond U+FFFF and no nesting past
    MAX_DEPTH, it is byte for byte what :func:`legacy_canonical` and JCS both
    write. Anything else is None: the caller then goes the strict way, which
    says what is wrong, if anything is.
    """
    if "\\" in text or _jcs_may_differ(text) or _too_deep(text):
        return None
    return Canonical(text)


def payload_text(payload: str | Mapping[str, Any],
                 max_bytes: int = DEFAULT_MAX_PAYLOAD) -> Canonical:
    """A payload as it is stored: JSON text (any spelling) or an object, checked and
    canonical, within ``max_bytes``; one already :class:`Canonical` as it is."""
    if isinstance(payload, Canonical):
        return payload
    if isinstance(payload, str):
        return parse_payload(payload, max_bytes)
    text = canonical_object(dict(payload))
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise BadInput(f"payload is {size} bytes, over the {max_bytes}-byte limit")
    return text


# A JSON string, as the "unrolled loop" (runs of plain characters matched at once):
# three times faster than an alternation per character.
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = {ord(c): None for c in ",:0123456789.eE+-truefalsn \t\r\n"}


def _too_deep(text: str) -> bool:
    """Whether a JSON text nests past MAX_DEPTH; counted only when its brackets (strings'
    included), which depth never exceeds, are more than that."""
    return text.count("{") + text.count("[") > MAX_DEPTH and text_depth(text) > MAX_DEPTH


def text_depth(text: str) -> int:
    """Levels of nesting in a JSON text: strings are dropped, then the brackets counted.

    Regular expressions and ``str.translate`` do the scanning in C, so a flat
    payload costs a few microseconds however long its strings are.
    """
    brackets = _STRINGS.sub("", text).translate(_BRACKETS)
    deepest = level = 0
    for c in brackets:
        if c in "{[":
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def stored_value(text: str) -> Any:
    """A stored payload as a value to hand on (a batch, a listing), whatever it holds.

    Payloads stored before the depth bound existed may be nested past it: such
    a payload is handed on as its JSON text, a string, so it can never break
    the batch or the listing it is part of.
    """
    if _too_deep(text):
        return text
    return json.loads(text)


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
