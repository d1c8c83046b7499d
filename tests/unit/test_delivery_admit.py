"""delivery.admit with an id found in the body: the order of its checks."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from agentbox.delivery import admit
from agentbox.errors import BadInput, SignatureMismatch
from agentbox.signatures import Check
from support.clock import T0_2023


def test_an_id_found_in_the_body_is_checked_as_a_key() -> None:
    assert admit("shop", lambda doc: doc["id"], b'{"id": "o-1", "n": 1}', 100) == (
        "o-1", '{"id":"o-1","n":1}')
    with pytest.raises(BadInput, match="512"):
        admit("shop", lambda doc: doc["id"], b'{"id": "%s"}' % (b"x" * 600), 1000)


def test_the_signature_is_checked_before_the_id_is_looked_for() -> None:
    looked: list[Any] = []
    check = Check("sha256=" + hmac.new(b"k", b"other", hashlib.sha256).hexdigest(), b"k",
                  T0_2023, "github")
    with pytest.raises(SignatureMismatch):
        admit("shop", looked.append, b'{"id": "o-1"}', 100, check)
    assert looked == []


def test_a_body_over_the_bound_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(BadInput, match="14 bytes, over the 13-byte limit"):
        admit("shop", lambda doc: "x", b'{"id": "o-1"} ', 13)
