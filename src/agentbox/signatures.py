"""Webhook signature checks, done on the raw body before anything is parsed.

Three kinds are understood, all an HMAC-SHA256 under a shared secret:

* ``github``: GitHub's ``X-Hub-Signature-256``, ``sha256=<hex>`` of the body.
* ``stripe``: Stripe's ``Stripe-Signature``, ``t=<unix>,v1=<hex>[,v1=<hex>…]``, the
  HMAC of ``<t>.<body>``, refused when ``t`` is further than the tolerance from now.
* ``hmac-sha256``: any other sender's header holding the HMAC of the body as hex
  (with or without a ``sha256=`` prefix) or as base64.

``auto`` (what ``agentbox ingest --signature`` uses) tells GitHub's form from
Stripe's by its spelling. A server that knows its sender names the kind, so a
request cannot pick a weaker form than the one configured.

A :class:`Check` is fed the body in pieces, so a body of any size is checked
without being held in memory; digests are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac

from agentbox.errors import SignatureMismatch, UsageError

STRIPE_TOLERANCE = 300  # seconds, Stripe's own default
KINDS = ("github", "stripe", "hmac-sha256")
# The header each kind is sent in, where its sender fixes one.
HEADERS = {"github": "X-Hub-Signature-256", "stripe": "Stripe-Signature"}


class Check:
    """One signature check: give the body with :meth:`update`, then call :meth:`verify`.

    A malformed signature is refused here, before any of the body is read.
    """

    def __init__(self, signature: str, secret: bytes, now: int, kind: str = "auto",
                 tolerance: int = STRIPE_TOLERANCE) -> None:
        if not secret:
            raise UsageError("the signature secret is empty")
        sig = signature.strip()
        if kind == "auto":
            kind = ("github" if sig.startswith("sha256=")
                    else "stripe" if "v1=" in sig and "t=" in sig else "")
            if not kind:
                raise SignatureMismatch("unrecognised signature format (expected "
                                        "'sha256=<hex>' or 't=<unix>,v1=<hex>')")
        self._stamp: int | None = None
        self._tolerance = tolerance
        self._now = now
        prefix = b""
        if kind == "github":
            if not sig.startswith("sha256="):
                raise SignatureMismatch("signature is not in the form 'sha256=<hex>'")
            self._candidates = [_hex(sig[len("sha256="):])]
        elif kind == "stripe":
            stamp, self._candidates = _stripe_parts(sig)
            self._stamp = int(stamp)
            prefix = stamp.encode("ascii") + b"."
        elif kind == "hmac-sha256":
            self._candidates = [_hex_or_base64(sig.removeprefix("sha256="))]
        else:
            raise UsageError(f"unknown signature kind {kind!r} (known: {', '.join(KINDS)})")
        self._mac = hmac.new(secret, prefix, hashlib.sha256)

    def update(self, chunk: bytes) -> None:
        self._mac.update(chunk)

    def verify(self) -> None:
        """Return quietly when the signature signs what was given; raise SignatureMismatch."""
        expected = self._mac.digest()
        # Compare every candidate, so the time taken does not tell which one matched.
        matched = [hmac.compare_digest(expected, c) for c in self._candidates]
        if not any(matched):
            raise SignatureMismatch("signature does not match the body")
        if self._stamp is not None and abs(self._now - self._stamp) > self._tolerance:
            raise SignatureMismatch(
                f"signature timestamp is more than {self._tolerance}s from now")


def verify(body: bytes, signature: str, secret: bytes, now: int,
           tolerance: int = STRIPE_TOLERANCE, kind: str = "auto") -> None:
    """Return quietly when ``signature`` signs ``body``; raise SignatureMismatch otherwise."""
    check = Check(signature, secret, now, kind, tolerance)
    check.update(body)
    check.verify()


def _hex(text: str) -> bytes:
    """A hex digest as bytes; anything else becomes bytes that match no digest."""
    cleaned = text.strip().lower()
    if len(cleaned) == 64 and cleaned.isascii():
        try:
            return bytes.fromhex(cleaned)
        except ValueError:
            pass
    return b""


def _hex_or_base64(text: str) -> bytes:
    found = _hex(text)
    if found or len(text.strip()) != 44:
        return found
    import base64
    import binascii

    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _stripe_parts(sig: str) -> tuple[str, list[bytes]]:
    stamp: str | None = None
    candidates: list[bytes] = []
    for part in sig.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            stamp = value
        elif name == "v1":
            candidates.append(_hex(value))
    if stamp is None or not (stamp.isascii() and stamp.isdigit()) or not candidates:
        raise SignatureMismatch("malformed Stripe-style signature")
    return stamp, candidates
