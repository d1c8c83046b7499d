"""Deliveries as GitHub and Stripe send them, through the sources' presets; ids from the body."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import pytest

from support.clock import T0_2023
from support.serving import Reply, Served, events, raw_exchange

pytestmark = pytest.mark.slow

Serve = Callable[..., Served]
Config = Callable[[str], None]
SECRET = "whsec_test"


def mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def stripe_signature(body: bytes, stamp: int = T0_2023, secret: str = SECRET) -> str:
    return f"t={stamp},v1={mac(secret, str(stamp).encode() + b'.' + body)}"


def stripe_event(event_id: Any, kind: str = "charge.succeeded") -> bytes:
    """A body as Stripe sends it: the event's id inside, no Idempotency-Key beside it."""
    return json.dumps({"id": event_id, "object": "event", "type": kind,
                       "data": {"object": {"id": "ch_1", "amount": 2000}}}).encode()


def test_stripe_deliveries_with_the_preset(serve: Serve, config: Config,
                                           place: str) -> None:
    # The server this replaced refused every one of these: 400 "no delivery id".
    config('[sources.stripe]\npreset = "stripe"\nsecret_env = "STRIPE_SECRET"\n')
    served = serve(env={"STRIPE_SECRET": SECRET})

    def deliver(body: bytes, signature: str | None) -> Reply:
        headers = {"Content-Type": "application/json; charset=utf-8",
                   "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
        if signature is not None:
            headers["Stripe-Signature"] = signature
        return served.post("stripe", body, key=None, headers=headers)

    body = stripe_event("evt_1NG8Du2eZvKYlo2CUI79vXWy")
    first = deliver(body, stripe_signature(body))
    assert (first.status, first.doc["outcome"], first.doc["source_id"]) == (
        200, "stored", "evt_1NG8Du2eZvKYlo2CUI79vXWy")
    again = deliver(body, stripe_signature(body, T0_2023 + 30))  # Stripe's retry, signed anew
    assert (again.status, again.doc["outcome"]) == (200, "duplicate")
    assert deliver(body, stripe_signature(body, secret="whsec_other")).status == 401
    assert deliver(body, stripe_signature(body, T0_2023 - 301)).status == 401  # out of tolerance
    assert deliver(body, None).status == 401
    # the signature is checked first: a forged body without an id learns nothing more
    forged = deliver(b'{"no": "id"}', stripe_signature(body))
    assert forged.status == 401 and "does not match" in forged.doc["error"]
    assert [row[2] for row in events(place)] == ["evt_1NG8Du2eZvKYlo2CUI79vXWy"]


def test_a_stripe_tolerance_of_the_sources_own(serve: Serve, config: Config,
                                               place: str) -> None:
    config('[sources.stripe]\npreset = "stripe"\nsecret_env = "S"\ntolerance = "1h"\n')
    served = serve(env={"S": SECRET})
    body = stripe_event("evt_late")
    late = served.post("stripe", body, key=None,
                       headers={"Stripe-Signature": stripe_signature(body, T0_2023 - 3000)})
    assert late.status == 200, late
    body = stripe_event("evt_later")
    later = served.post("stripe", body, key=None,
                        headers={"Stripe-Signature": stripe_signature(body, T0_2023 - 3601)})
    assert later.status == 401 and "3600s" in later.doc["error"]


def test_github_deliveries_with_the_preset(serve: Serve, config: Config,
                                           place: str) -> None:
    config('[sources.github]\npreset = "github"\nsecret_env = "GH_SECRET"\n')
    served = serve(env={"GH_SECRET": SECRET})
    body = json.dumps({"action": "opened", "number": 1, "pull_request": {"id": 1}}).encode()

    def deliver(delivery: str | None, signature: str) -> Reply:
        headers = {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": signature,
                   "User-Agent": "GitHub-Hookshot/044aadd", "Content-Type": "application/json"}
        if delivery is not None:
            headers["X-GitHub-Delivery"] = delivery
        return served.post("github", body, key=None, headers=headers)

    guid = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    ok = deliver(guid, "sha256=" + mac(SECRET, body))
    assert (ok.status, ok.doc["source_id"]) == (200, guid)
    assert deliver(guid, "sha256=" + mac("wrong", body)).status == 401
    missing = deliver(None, "sha256=" + mac(SECRET, body))
    assert missing.status == 400 and "X-GitHub-Delivery" in missing.doc["error"]
    assert [row[2] for row in events(place)] == [guid]


@pytest.mark.parametrize(("body", "needle"), [
    (b'{"type": "x"}', "the body has no field 'data.id'"),
    (b'{"data": "flat"}', "the body has no field 'data.id'"),
    (b'{"data": {"id": 7}}', "field 'data.id' is a number, not a string"),
    (b'{"data": {"id": null}}', "field 'data.id' is null, not a string"),
    (b'{"data": {"id": ""}}', "field 'data.id' is empty"),
    (b'{"data": {"id": "' + b"x" * 600 + b'"}}', "512"),
    (b'["not", "an object"]', "must be a JSON object"),
])
def test_an_id_field_that_is_missing_or_no_string_is_400(serve: Serve, config: Config,
                                                         place: str, body: bytes,
                                                         needle: str) -> None:
    config('[sources.shop]\nid_field = "data.id"\n')
    served = serve()
    answer = served.post("shop", body, key="ignored")
    assert answer.status == 400 and needle in answer.doc["error"], answer
    assert events(place) == []


def test_an_id_from_a_nested_field_and_an_id_header_given_twice(serve: Serve, config: Config,
                                                                place: str) -> None:
    config('[sources.shop]\nid_field = "data.id"\n')
    served = serve()
    answer = served.post("shop", b'{"data": {"id": "o-1"}}', key=None)
    assert (answer.status, answer.doc["source_id"]) == (200, "o-1")
    twice = raw_exchange(served.port, b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\n"
                         b"Idempotency-Key: a\r\nIdempotency-Key: b\r\nContent-Length: 2\r\n"
                         b"Connection: close\r\n\r\n{}")
    assert twice.startswith(b"HTTP/1.1 400 ") and b"more than once" in twice, twice
    assert [row[1:3] for row in events(place)] == [("shop", "o-1")]


@pytest.mark.parametrize(("text", "needle"), [
    ('[sources.s]\npreset = "gitlab"\n', "preset must be one of github, stripe"),
    ('[sources.s]\npreset = "github"\n', "preset github needs secret_env"),
    ('[sources.s]\nid_header = "X-Id"\nid_field = "id"\n', "two places for one id"),
    ('[sources.s]\nid_field = "a..b"\n', "dotted path"),
    ('[sources.s]\nsignature = "github"\nsecret_env = "S"\ntolerance = "5m"\n',
     'for signature = "stripe" only'),
    ('[sources.s]\npreset = "stripe"\nsecret_env = "S"\ntolerance = "soon"\n',
     "not a duration"),
])
def test_a_bad_source_table_stops_serve_starting(config: Config, agentbox_proc: Any,
                                                 text: str, needle: str) -> None:
    config(text)
    done = agentbox_proc("serve", "--listen", "127.0.0.1:0", env={"S": "x"}, timeout=60)
    assert done.returncode == 2, (text, done.stderr)
    assert needle in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
