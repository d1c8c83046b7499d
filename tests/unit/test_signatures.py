"""Webhook signatures: GitHub's sha256=<hex>, Stripe's t=…,v1=… with a tolerance."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from agentbox.errors import SignatureMismatch, UsageError
from agentbox.signatures import STRIPE_TOLERANCE, verify

SECRET = b"whsec_test"
BODY = b'{"id": "evt_1", "type": "charge.succeeded"}'
NOW = 1_700_000_000


def mac(message: bytes, secret: bytes = SECRET) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def test_github_form() -> None:
    verify(BODY, "sha256=" + mac(BODY), SECRET, NOW)
    verify(BODY, "  sha256=" + mac(BODY).upper() + "\n", SECRET, NOW)  # header noise
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY + b" ", "sha256=" + mac(BODY), SECRET, NOW)
    with pytest.raises(SignatureMismatch):
        verify(BODY, "sha256=" + mac(BODY, b"other"), SECRET, NOW)
    with pytest.raises(SignatureMismatch):
        verify(BODY, "sha256=" + "é" * 64, SECRET, NOW)


def test_stripe_form_and_tolerance() -> None:
    def header(stamp: int, secret: bytes = SECRET) -> str:
        return f"t={stamp},v1={mac(str(stamp).encode() + b'.' + BODY, secret)}"

    verify(BODY, header(NOW), SECRET, NOW)
    verify(BODY, header(NOW - STRIPE_TOLERANCE), SECRET, NOW)
    verify(BODY, header(NOW + STRIPE_TOLERANCE), SECRET, NOW)
    with pytest.raises(SignatureMismatch, match="timestamp"):
        verify(BODY, header(NOW - STRIPE_TOLERANCE - 1), SECRET, NOW)
    with pytest.raises(SignatureMismatch, match="timestamp"):
        verify(BODY, header(NOW), SECRET, NOW + 3600)
    verify(BODY, header(NOW - 3600), SECRET, NOW, tolerance=3600)
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY, header(NOW, b"other"), SECRET, NOW)
    # the timestamp is part of what is signed
    forged = header(NOW).replace(f"t={NOW}", f"t={NOW + 1}")
    with pytest.raises(SignatureMismatch, match="does not match"):
        verify(BODY, forged, SECRET, NOW)


@pytest.mark.parametrize("header", [
    "t=abc,v1=00", "t=,v1=00", "t=٣,v1=00", "t=²,v1=00", "v1=00,t=", "t=1,v1=",
])
def test_malformed_stripe_headers(header: str) -> None:
    with pytest.raises(SignatureMismatch):
        verify(BODY, header, SECRET, NOW)


@pytest.mark.parametrize("header", ["", "md5=00", "v1=00", "deadbeef"])
def test_unknown_forms_are_mismatches(header: str) -> None:
    with pytest.raises(SignatureMismatch, match="unrecognised"):
        verify(BODY, header, SECRET, NOW)


def test_empty_secret_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        verify(BODY, "sha256=" + mac(BODY, b""), b"", NOW)
