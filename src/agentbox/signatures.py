"""Webhook signature checks, done on the raw body before anything is parsed.

Two forms are understood:

* GitHub's ``X-Hub-Signature-256``: ``sha256=<hex>``, the HMAC-SHA256 of the body.
* Stripe's ``Stripe-Signature``: ``t=<unix>,v1=<hex>[,v1=<hex>…]``, the HMAC-SHA256
  of ``<t>.<body>``, refused when ``t`` is further than the tolerance from now.

Digests are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac

from agentbox.errors import SignatureMismatch, UsageError

STRIPE_TOLERANCE = 300  # seconds, Stripe's own default


def _digest(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _matches(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode("ascii"), given.strip().lower().encode("ascii",
                                                                                      "replace"))


def verify(body: bytes, signature: str, secret: bytes, now: int,
           tolerance: int = STRIPE_TOLERANCE) -> None:
    """Return quietly when ``signature`` signs ``body``; raise SignatureMismatch otherwise."""
    if not secret:
        raise UsageError("the signature secret is empty")
    sig = signature.strip()
    if sig.startswith("sha256="):
        if not _matches(_digest(secret, body), sig[len("sha256="):]):
            raise SignatureMismatch("signature does not match the body")
        return
    if "v1=" in sig and "t=" in sig:
        _verify_stripe(body, sig, secret, now, tolerance)
        return
    raise SignatureMismatch("unrecognised signature format (expected 'sha256=<hex>' "
                            "or 't=<unix>,v1=<hex>')")


def _verify_stripe(body: bytes, sig: str, secret: bytes, now: int, tolerance: int) -> None:
    stamp: str | None = None
    candidates: list[str] = []
    for part in sig.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            stamp = value
        elif name == "v1":
            candidates.append(value)
    if stamp is None or not (stamp.isascii() and stamp.isdigit()) or not candidates:
        raise SignatureMismatch("malformed Stripe-style signature")
    expected = _digest(secret, stamp.encode("ascii") + b"." + body)
    # Check every candidate, so the time taken does not reveal which one matched.
    matched = [_matches(expected, c) for c in candidates]
    if not any(matched):
        raise SignatureMismatch("signature does not match the body")
    if abs(now - int(stamp)) > tolerance:
        raise SignatureMismatch(f"signature timestamp is more than {tolerance}s from now")
