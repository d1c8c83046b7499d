"""Webhook signatures: GitHub's sha256=<hex>, Stripe's t=…,v1=… with a tolerance."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from agentbox.errors import SignatureMismatch, UsageError
from agentbox.signatures import STRIPE_TOLERANCE, verify
from support.clock import T0_2023

SECRET = b"whsec_test"
BODY = b'{"id": "evt_1", "type": "charge.succeeded"}'


def mac(message: bytes, secret: bytes = SECRET) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def test_github_form() -> None:
    verify(BODY, "sha256=" + mac(BODY), SECRET, T0_2023)
    verify(BODY, "  sha256=" + mac(BODY).upper() + "\n", SECRET, T0_2023)  # header noise
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY + b" ", "sha256=" + mac(BODY), SECRET, T0_2023)
    with pytest.raises(SignatureMismatch):
        verify(BODY, "sha256=" + mac(BODY, b"other"), SECRET, T0_2023)
    with pytest.raises(SignatureMismatch):
        verify(BODY, "sha256=" + "é" * 64, SECRET, T0_2023)


def test_stripe_form_and_tolerance() -> None:
    def header(stamp: int, secret: bytes = SECRET) -> str:
        return f"t={stamp},v1={mac(str(stamp).encode() + b'.' + BODY, secret)}"

    verify(BODY, header(T0_2023), SECRET, T0_2023)
    verify(BODY, header(T0_2023 - STRIPE_TOLERANCE), SECRET, T0_2023)
    verify(BODY, header(T0_2023 + STRIPE_TOLERANCE), SECRET, T0_2023)
    with pytest.raises(SignatureMismatch, match="timestamp"):
        verify(BODY, header(T0_2023 - STRIPE_TOLERANCE - 1), SECRET, T0_2023)
    with pytest.raises(SignatureMismatch, match="timestamp"):
        verify(BODY, header(T0_2023), SECRET, T0_2023 + 3600)
    verify(BODY, header(T0_2023 - 3600), SECRET, T0_2023, tolerance=3600)
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY, header(T0_2023, b"other"), SECRET, T0_2023)
    # the timestamp is part of what is signed
    forged = header(T0_2023).replace(f"t={T0_2023}", f"t={T0_2023 + 1}")
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY, forged, SECRET, T0_2023)


@pytest.mark.parametrize("header", [
    "t=abc,v1=00", "t=,v1=00", "t=٣,v1=00", "t=²,v1=00", "v1=00,t=", "t=1,v1=",
])
def test_malformed_stripe_headers(header: str) -> None:
    with pytest.raises(SignatureMismatch):
        verify(BODY, header, SECRET, T0_2023)


@pytest.mark.parametrize("header", ["", "md5=00", "v1=00", "deadbeef"])
def test_unknown_forms_are_mismatches(header: str) -> None:
    with pytest.raises(SignatureMismatch, match="unrecognised"):
        verify(BODY, header, SECRET, T0_2023)


def test_empty_secret_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        verify(BODY, "sha256=" + mac(BODY, b""), b"", T0_2023)


def test_github_published_vector_as_a_named_kind() -> None:
    body, secret = b"Hello, World!", b"It's a Secret to Everybody"
    good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    verify(body, good, secret, T0_2023, kind="github")
    with pytest.raises(SignatureMismatch):
        verify(body, good[:-1] + "d", secret, T0_2023, kind="github")
    # a server that expects GitHub's form does not take another one
    with pytest.raises(SignatureMismatch, match="sha256="):
        verify(body, good.removeprefix("sha256="), secret, T0_2023, kind="github")


def test_a_named_kind_refuses_the_other_forms() -> None:
    stripe = f"t={T0_2023},v1={mac(str(T0_2023).encode() + b'.' + BODY)}"
    with pytest.raises(SignatureMismatch):
        verify(BODY, stripe, SECRET, T0_2023, kind="github")
    with pytest.raises(SignatureMismatch):
        verify(BODY, "sha256=" + mac(BODY), SECRET, T0_2023, kind="stripe")


def test_plain_hmac_in_hex_or_base64() -> None:
    import base64

    digest = hmac.new(SECRET, BODY, hashlib.sha256).digest()
    for spelling in (digest.hex(), digest.hex().upper(), "sha256=" + digest.hex(),
                     base64.b64encode(digest).decode()):
        verify(BODY, spelling, SECRET, T0_2023, kind="hmac-sha256")
    for wrong in ("", "zz" * 32, base64.b64encode(digest[::-1]).decode(), "!" * 44,
                  digest.hex()[:-2]):
        with pytest.raises(SignatureMismatch):
            verify(BODY, wrong, SECRET, T0_2023, kind="hmac-sha256")


def test_a_check_fed_in_pieces_equals_one_fed_whole() -> None:
    from agentbox.signatures import Check

    check = Check("sha256=" + mac(BODY), SECRET, T0_2023)
    for i in range(0, len(BODY), 7):
        check.update(BODY[i:i + 7])
    check.verify()
    partial = Check("sha256=" + mac(BODY), SECRET, T0_2023)
    partial.update(BODY[:-1])
    with pytest.raises(SignatureMismatch):
        partial.verify()


def test_unknown_kind_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown signature kind"):
        verify(BODY, "x", SECRET, T0_2023, kind="md5")
