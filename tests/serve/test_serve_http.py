"""`agentbox serve` over loopback: every answer it gives, from a real client to a real process."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.jsonutil import MAX_DEPTH
from support.clock import T0_2023
from support.processes import wait_for
from support.serving import Served, events, raw_exchange, read_all

pytestmark = pytest.mark.slow

Serve = Callable[..., Served]
GITHUB_SECRET = "It's a Secret to Everybody"
# GitHub's published example: this secret, the body "Hello, World!", this signature.
GITHUB_VECTOR = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_stored_duplicate_conflict(serve: Serve, place: str) -> None:
    served = serve()
    first = served.post("github", '{"b": 2, "a": 1}', key="d-1")
    assert (first.status, first.doc) == (200, {"outcome": "stored", "id": 1,
                                               "source": "github", "source_id": "d-1"})
    again = served.post("github", '{"a":1,"b":2}', key="d-1")  # reordered: the same payload
    assert (again.status, again.doc["outcome"], again.doc["id"]) == (200, "duplicate", 1)
    changed = served.post("github", '{"a": 9}', key="d-1")
    assert changed.status == 409
    assert changed.doc["outcome"] == "conflict" and changed.doc["id"] == 1
    assert "github/d-1 is event 1" in changed.doc["error"]
    assert events(place) == [(1, "github", "d-1", '{"a":1,"b":2}')]


def test_bad_bodies_and_missing_ids_are_400(serve: Serve, place: str) -> None:
    served = serve()
    deep = '{"a":' * MAX_DEPTH + "{}" + "}" * MAX_DEPTH
    for body, needle in (("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object"),
                         ('{"a": NaN}', "NaN"), (b'{"a": "\xff"}', "UTF-8"),
                         ('{"a": 1, "a": 2}', "duplicate key"), ("", "not valid JSON"),
                         (deep, f"nested more than {MAX_DEPTH} levels")):
        answer = served.post("chat", body, key="k")
        assert answer.status == 400, (body, answer)
        assert needle in answer.doc["error"], (body, answer.doc)
    missing = served.post("chat", "{}", key=None)
    assert missing.status == 400 and "Idempotency-Key" in missing.doc["error"]
    empty = served.post("chat", "{}", key="")
    assert empty.status == 400
    assert events(place) == []


def test_id_header_is_the_sources_own(serve: Serve, config: Callable[[str], None],
                                      place: str) -> None:
    config('[sources.github]\nid_header = "X-GitHub-Delivery"\n')
    served = serve()
    assert served.post("github", "{}", key="ignored").status == 400
    answer = served.post("github", "{}", key=None, headers={"X-GitHub-Delivery": "g-1"})
    assert answer.status == 200 and answer.doc["source_id"] == "g-1"
    # a source without a table keeps the default header; a key may be UTF-8 text
    answer = served.post("other", "{}", key=None,
                         headers={"Idempotency-Key": "é-1".encode().decode("latin-1")})
    assert answer.status == 200 and answer.doc["source_id"] == "é-1"
    assert [row[1:3] for row in events(place)] == [("github", "g-1"), ("other", "é-1")]


def test_reserved_sources_unknown_routes_and_methods(serve: Serve, place: str) -> None:
    served = serve()
    for source in ("timer", "approval"):
        answer = served.post(source, "{}")
        assert answer.status == 403, answer
    assert served.request("GET", "/").status == 404
    assert served.request("POST", "/hooks/").status == 404
    assert served.request("POST", "/hooks/a/b", "{}").status == 404
    assert served.request("POST", "/elsewhere", "{}").status == 404
    wrong = served.request("GET", "/hooks/github")
    assert wrong.status == 405 and wrong.headers["allow"] == "POST"
    wrong = served.request("POST", "/healthz", "{}")
    assert wrong.status == 405 and wrong.headers["allow"] == "GET, HEAD"
    assert served.request("DELETE", "/hooks/github").status == 405
    assert events(place) == []


def test_healthz(serve: Serve) -> None:
    served = serve()
    answer = served.request("GET", "/healthz")
    assert (answer.status, answer.doc) == (200, {"status": "ok"})
    head = served.request("HEAD", "/healthz")
    assert head.status == 200 and head.doc is None


def test_a_source_in_the_path_is_percent_decoded(serve: Serve, place: str) -> None:
    served = serve()
    assert served.post("my%20hooks", "{}").status == 200
    assert served.post("%ff", "{}").status == 400
    assert [row[1] for row in events(place)] == ["my hooks"]


# --- size ----------------------------------------------------------------------------

def test_a_declared_length_over_the_bound_is_refused_before_the_body(
        serve: Serve, config: Callable[[str], None], place: str) -> None:
    config("max_payload = 1000\n")
    served = serve()
    assert served.post("chat", json.dumps({"pad": "x" * 900})).status == 200
    over = served.post("chat", json.dumps({"pad": "x" * 1000}), key="2")
    assert over.status == 413 and "1000-byte limit" in over.doc["error"]
    # A billion bytes declared and none sent: the answer comes without waiting for them.
    started = time.monotonic()
    answer = raw_exchange(served.port, b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\n"
                          b"Idempotency-Key: 3\r\nContent-Length: 1000000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"Connection: close" in answer
    assert time.monotonic() - started < 10
    assert len(events(place)) == 1


def test_a_chunked_body_is_refused_once_past_the_bound(
        serve: Serve, config: Callable[[str], None], place: str) -> None:
    config("max_payload = 1000\n")
    served = serve()

    def chunked(*parts: bytes, key: str) -> bytes:
        head = (b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                b"Idempotency-Key: " + key.encode() + b"\r\n\r\n")
        return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)

    ok = raw_exchange(served.port, chunked(b'{"a":', b' "b"}', b"", key="small")
                      .replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1))
    assert ok.startswith(b"HTTP/1.1 200 "), ok
    # Over the bound in the third chunk, with no end ever sent: refused all the same.
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(chunked(b'{"pad": "', b"x" * 600, b"x" * 600, key="big"))
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert [row[2] for row in events(place)] == ["small"]


# --- signatures ------------------------------------------------------------------------

GITHUB_CONFIG = """
[sources.github]
id_header = "X-GitHub-Delivery"
secret_env = "GITHUB_SECRET"
signature = "github"
"""


def github_signature(body: bytes, secret: str = GITHUB_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_github_signature_published_vector(serve: Serve, config: Callable[[str], None],
                                           place: str) -> None:
    config(GITHUB_CONFIG)
    served = serve(env={"GITHUB_SECRET": GITHUB_SECRET})

    def deliver(body: bytes, signature: str | None, key: str) -> Any:
        headers = {"X-GitHub-Delivery": key}
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        return served.post("github", body, key=None, headers=headers)

    # The published vector passes the check; "Hello, World!" is then no JSON object (400).
    vector = deliver(b"Hello, World!", GITHUB_VECTOR, "v")
    assert vector.status == 400 and "not valid JSON" in vector.doc["error"]
    tampered = deliver(b"Hello, World!", GITHUB_VECTOR[:-1] + "d", "v")
    assert tampered.status == 401 and "does not match" in tampered.doc["error"]
    body = b'{"action": "opened"}'
    missing = deliver(body, None, "g-1")
    assert missing.status == 401 and "X-Hub-Signature-256" in missing.doc["error"]
    assert deliver(body, github_signature(body, "wrong"), "g-1").status == 401
    stripe_form = f"t={T0_2023},v1={github_signature(body).removeprefix('sha256=')}"
    assert deliver(body, stripe_form, "g-1").status == 401  # not GitHub's form: refused
    assert deliver(body, github_signature(body), "g-1").status == 200
    assert [row[2] for row in events(place)] == ["g-1"]


def test_stripe_signature_and_its_tolerance(serve: Serve, config: Callable[[str], None],
                                            place: str) -> None:
    config('[sources.stripe]\nsecret_env = "STRIPE_SECRET"\nsignature = "stripe"\n')
    secret = "whsec_test"
    served = serve(env={"STRIPE_SECRET": secret})
    body = b'{"id": "evt_1", "type": "charge.succeeded"}'

    def header(stamp: int, key: str = secret) -> str:
        mac = hmac.new(key.encode(), str(stamp).encode() + b"." + body, hashlib.sha256)
        return f"t={stamp},v0=00,v1={mac.hexdigest()}"

    def deliver(signature: str) -> Any:
        return served.post("stripe", body, key="evt_1",
                           headers={"Stripe-Signature": signature})

    assert deliver(header(T0_2023 - 3600)).status == 401  # the server's clock is pinned at T0
    assert deliver(header(T0_2023, "other")).status == 401
    assert deliver("sha256=" + "0" * 64).status == 401
    ok = deliver(header(T0_2023 - 60))
    assert ok.status == 200 and ok.doc["outcome"] == "stored"
    assert [row[2] for row in events(place)] == ["evt_1"]


def test_plain_hmac_in_a_header_of_the_senders_choice(
        serve: Serve, config: Callable[[str], None]) -> None:
    config('[sources.shop]\nsecret_env = "SHOP_SECRET"\nsignature = "hmac-sha256"\n'
           'signature_header = "X-Shop-Hmac-Sha256"\n')
    served = serve(env={"SHOP_SECRET": "k"})
    body = b'{"order": 1}'
    digest = hmac.new(b"k", body, hashlib.sha256)
    import base64

    assert served.post("shop", body, key="1", headers={
        "X-Shop-Hmac-Sha256": base64.b64encode(digest.digest()).decode()}).status == 200
    assert served.post("shop", body, key="2", headers={
        "X-Shop-Hmac-Sha256": digest.hexdigest()}).status == 200
    assert served.post("shop", body, key="3", headers={
        "X-Hub-Signature-256": "sha256=" + digest.hexdigest()}).status == 401


# --- the database --------------------------------------------------------------------

def test_a_database_that_stays_busy_is_503_with_retry_after(serve: Serve, inbox_path: Path,
                                                            place: str) -> None:
    served = serve("--busy-timeout", "1s")
    assert served.post("chat", "{}", key="before").status == 200
    blocker = sqlite3.connect(inbox_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        busy = served.post("chat", "{}", key="during")
        assert busy.status == 503, busy
        assert busy.headers["retry-after"] == "1"
        assert time.monotonic() - started >= 0.9
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert served.post("chat", "{}", key="during").status == 200
    assert [row[2] for row in events(place)] == ["before", "during"]


# --- connections -------------------------------------------------------------------

def test_keep_alive_carries_many_requests_on_one_connection(serve: Serve, place: str) -> None:
    served = serve()
    conn = served.connect()
    try:
        assert served.request("GET", "/healthz", conn=conn).status == 200
        sock = conn.sock
        for i in range(20):
            assert served.post("chat", json.dumps({"i": i}), key=f"k{i}", conn=conn).status == 200
            assert conn.sock is sock, "the connection was not kept"
    finally:
        conn.close()
    assert len(events(place)) == 20


def test_pipelined_requests_are_answered_in_order(serve: Serve, place: str) -> None:
    served = serve()
    one = (b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %d\r\n"
           b"Content-Length: 2\r\n\r\n{}")
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = raw_exchange(served.port, one % 1 + one % 2 + one % 1 + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 4, answer
    assert answer.index(b'"stored"') < answer.index(b'"duplicate"')
    assert [row[2] for row in events(place)] == ["1", "2"]


def test_a_slow_client_is_cut_off_without_holding_up_others(serve: Serve, place: str) -> None:
    # One worker thread only: if the trickling client held it, every other request would
    # wait until the trickle is cut off, seconds later.
    served = serve("--threads", "1", "--request-timeout", "4s")
    trickle = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    head = b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"
    started = time.monotonic()
    cut_off = None
    try:
        for i, byte in enumerate(head * 10):  # never finishes its head, but never pauses long
            if i % 20 == 10:
                asked = time.monotonic()
                assert served.post("chat", "{}", key=f"fast-{i}").status == 200
                assert time.monotonic() - asked < 2, "held up behind the slow client"
            try:
                trickle.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                cut_off = time.monotonic() - started
                break
            time.sleep(0.05)
        else:
            pytest.fail("the trickling client was never cut off")
    finally:
        trickle.close()
    assert 3.5 <= cut_off < 15, cut_off
    assert all(row[2].startswith("fast-") for row in events(place))
    assert len(events(place)) >= 3


def test_a_body_that_stops_coming_gets_408(serve: Serve, place: str) -> None:
    served = serve("--threads", "1", "--request-timeout", "1s")
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempotency-Key: s\r\n"
                     b"Content-Length: 100\r\n\r\n{\"a\":")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert served.post("chat", "{}", key="after").status == 200
    assert [row[2] for row in events(place)] == ["after"]


def test_malformed_requests_get_an_answer_not_a_hang(serve: Serve) -> None:
    served = serve()
    for data, status in ((b"NONSENSE\r\n\r\n", b"400"),
                         (b"POST /hooks/x HTTP/1.1\r\nContent-Length: 2\r\n"
                          b"Transfer-Encoding: chunked\r\nIdempotency-Key: a\r\n\r\n", b"400"),
                         (b"POST /hooks/x HTTP/1.1\r\nContent-Length: -1\r\n"
                          b"Idempotency-Key: a\r\n\r\n", b"400"),
                         (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"p" * 70_000
                          + b"\r\n\r\n", b"431"),
                         (b"GET /healthz HTTP/1.1\r\n\r\n", b"400"),  # HTTP/1.1 requires Host
                         (b"GET /healthz HTTP/9.9\r\n\r\n", b"505")):
        answer = raw_exchange(served.port, data)
        assert answer.split(b" ")[1] == status, (data[:40], answer)
    assert served.request("GET", "/healthz").status == 200


# --- start-up and stopping ---------------------------------------------------------

def test_a_bad_source_table_or_a_missing_secret_stops_it_starting(
        home: Path, config: Callable[[str], None], agentbox_proc: Callable[..., Any]) -> None:
    for text, needle in (('[sources.timer]\nid_header = "X"\n', "agentbox's own"),
                         ('[sources.gh]\nsignature = "github"\n', "go together"),
                         ('[sources.gh]\nsignature = "md5"\nsecret_env = "S"\n', "one of"),
                         ('[sources.gh]\nsignature = "hmac-sha256"\nsecret_env = "S"\n',
                          "signature_header"),
                         ('[sources.gh]\nid_hedaer = "X"\n', "unknown setting"),
                         ('[sources.gh]\nid_header = "X Y"\n', "not an HTTP header"),
                         ('[sources.gh]\nsignature = "github"\nsecret_env = "NOT_SET"\n',
                          "NOT_SET")):
        config(text)
        done = agentbox_proc("serve", "--listen", "127.0.0.1:0", timeout=60)
        assert done.returncode == 2, (text, done.stderr)
        assert needle in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    for listen in ("8787", "host:", "127.0.0.1:99999", ":80"):
        done = agentbox_proc("serve", "--listen", listen)
        assert done.returncode == 2, (listen, done.stderr)


def test_an_address_in_use_is_one_line_and_exit_1(serve: Serve,
                                                  agentbox_proc: Callable[..., Any]) -> None:
    served = serve()
    done = agentbox_proc("serve", "--listen", f"127.0.0.1:{served.port}")
    assert done.returncode == 1
    assert "cannot listen" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_stopping_finishes_the_request_under_way_then_exits_0(
        serve: Serve, place: str, signal_name: str) -> None:
    import signal

    served = serve()
    idle = served.connect()
    assert served.request("GET", "/healthz", conn=idle).status == 200  # kept alive, idle
    body = b'{"half": "way"}'
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempotency-Key: inflight\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
        time.sleep(0.3)  # the worker is now waiting for the rest of the body
        served.proc.send_signal(getattr(signal, signal_name))

        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", served.port), timeout=5).close()
            except (ConnectionRefusedError, ConnectionResetError):  # reset: caught closing
                return True
            return False

        wait_for(refused, "the server to stop accepting", timeout=30)
        assert served.proc.poll() is None, "it left before answering the request under way"
        sock.sendall(body[5:])
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"Connection: close" in answer
    assert served.proc.wait(timeout=30) == 0
    idle.close()
    assert [row[2] for row in events(place)] == ["inflight"]
    assert served.lines[-1] == "agentbox: stopped"
