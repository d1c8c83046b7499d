"""The HTTP server in-process, with applications of the test's own: what a page or an API on it
gets (HTML, cookies, forms, errors), and the bounds it keeps on connections."""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentbox.httpserver import Server
from agentbox.web import HTTPError, Request, Response
from support.serving import raw_exchange, read_all

Start = Callable[..., Server]


@pytest.fixture
def start() -> Iterator[Start]:
    """start(app, **options) -> a server answering on a free loopback port, stopped after."""
    running: list[tuple[Server, threading.Thread]] = []

    def begin(app: Callable[[Request], Response], **options: Any) -> Server:
        options.setdefault("max_body", 64 * 1024)
        server = Server(("127.0.0.1", 0), app, **options)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        running.append((server, thread))
        return server

    yield begin
    for server, thread in running:
        server.stop()
        thread.join(30)
        assert not thread.is_alive(), "serve() did not return after stop()"


def ask(server: Server, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection(*server.address, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def page(request: Request) -> Response:
    """An approval-link page, as the console and the links will have them."""
    if request.method == "GET":
        return Response.html(200, f"<p>{request.path} for {request.cookies().get('who')}</p>",
                             [("Set-Cookie", "a=1; HttpOnly"), ("Set-Cookie", "b=2; HttpOnly")])
    form = request.form()
    return Response.json(200, {"form": form, "args": request.query_args(),
                               "bearer": request.headers.get("authorization")})


def test_a_page_with_cookies_a_form_and_a_bearer_header(start: Start) -> None:
    server = start(page)
    conn = http.client.HTTPConnection(*server.address, timeout=30)
    conn.request("GET", "/a/TOKEN", headers={"Cookie": 'who="ann"; junk; x=1'})
    got = conn.getresponse()
    assert got.status == 200 and got.read() == b"<p>/a/TOKEN for ann</p>"
    assert got.getheader("content-type") == "text/html; charset=utf-8"
    assert [v for k, v in got.getheaders() if k == "Set-Cookie"] == ["a=1; HttpOnly",
                                                                     "b=2; HttpOnly"]
    conn.request("POST", "/a/TOKEN?lang=en", body=b"answer=yes&csrf=t%C3%A9",
                 headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                          "AUTHORIZATION": "Bearer s3cret"})
    got = conn.getresponse()
    assert got.status == 200, got.read()
    import json

    assert json.loads(got.read()) == {"form": {"answer": "yes", "csrf": "té"},
                                      "args": {"lang": "en"}, "bearer": "Bearer s3cret"}
    conn.close()


@pytest.mark.parametrize(("body", "kind", "status", "needle"), [
    (b"answer=yes", "application/json", 415, "expected a form"),
    (b"answer=yes&answer=no", "application/x-www-form-urlencoded", 400, "more than once"),
    (b"answer", "application/x-www-form-urlencoded", 400, "malformed form"),
    (b"a=%ff", "application/x-www-form-urlencoded", 400, "not UTF-8"),
    (b"a=\xe9", "application/x-www-form-urlencoded", 400, "percent-encoded ASCII"),
    (b"&".join(b"f%d=1" % i for i in range(101)), "application/x-www-form-urlencoded", 400,
     "malformed form"),
    (b"a=" + b"x" * 70_000, "application/x-www-form-urlencoded", 413, "65536-byte limit"),
])
def test_a_form_that_is_not_one_is_refused(start: Start, body: bytes, kind: str, status: int,
                                           needle: str) -> None:
    server = start(page, max_body=100_000)
    got = ask(server, "POST", "/a/T", body, {"Content-Type": kind})
    assert got.status == status


def test_refusals_are_json_with_their_headers(start: Start) -> None:
    def refuse(request: Request) -> Response:
        raise HTTPError(405, "no", [("Allow", "GET")])

    conn = http.client.HTTPConnection(*start(refuse).address, timeout=30)
    conn.request("PUT", "/")
    got = conn.getresponse()
    assert (got.status, got.read(), got.getheader("allow")) == (405, b'{"error": "no"}\n', "GET")
    conn.close()


def test_an_application_that_fails_answers_500_and_the_log_says_why(start: Start) -> None:
    logged: list[str] = []

    def broken(request: Request) -> Response:
        if request.path == "/header":
            return Response(200, b"x", "text/plain", [("X-Bad", "two\r\nlines")])
        raise RuntimeError("the disk is on fire")

    server = start(broken, log=logged.append)
    for path in ("/boom", "/header"):
        got = ask(server, "GET", path)
        assert got.status == 500
    assert any("RuntimeError: the disk is on fire" in line for line in logged), logged
    assert any("/header: cannot send the answer" in line for line in logged), logged
    assert ask(server, "GET", "/boom").status == 500  # and it goes on serving


def test_head_gets_the_head_alone(start: Start) -> None:
    server = start(lambda r: Response.json(200, {"status": "ok"}))
    answer = raw_exchange(server.address[1], b"HEAD / HTTP/1.1\r\nHost: x\r\n"
                          b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 17\r\n" in answer
    assert answer.endswith(b"\r\n\r\n"), answer


def test_connections_past_the_bound_are_turned_away_and_it_is_said_once(start: Start) -> None:
    logged: list[str] = []
    server = start(lambda r: Response.json(200, {}), max_connections=3, log=logged.append)
    held = [socket.create_connection(server.address, timeout=30) for _ in range(3)]
    try:
        time.sleep(0.3)  # the loop has accepted them
        for _ in range(2):
            answer = raw_exchange(server.address[1], b"")
            assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert len([line for line in logged if "turning connections away" in line]) == 1
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert ask(server, "GET", "/").status == 200


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(start: Start) -> None:
    server = start(lambda r: Response.json(200, {}), idle_timeout=0.5)
    with socket.create_connection(server.address, timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in answer
    assert 0.4 < time.monotonic() - started < 5


def test_a_client_that_does_not_read_its_answer_is_cut_off(start: Start) -> None:
    big = b"x" * (64 * 1024 * 1024)  # far more than the socket buffers hold
    server = start(lambda r: Response(200, big if r.path == "/big" else b"ok", "text/plain"),
                   write_timeout=1.0, threads=1)
    with socket.create_connection(server.address, timeout=30) as sock:
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        for _ in range(3):  # its one worker is free: the loop does the writing
            asked = time.monotonic()
            assert ask(server, "GET", "/small").status == 200
            assert time.monotonic() - asked < 1
        time.sleep(1.5)
        received = len(read_all(sock))
    assert received < len(big), "the whole answer went to a client that was not reading"


def test_a_stop_after_the_server_has_ended_writes_to_no_file() -> None:
    """Its wake-up pipe is closed when serve() returns; the numbers it had may be another
    file's by the time a late stop() comes, and nothing may be written there."""
    server = Server(("127.0.0.1", 0), page, max_body=1024)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    server.stop()
    thread.join(30)
    read, write = os.pipe()  # likely given the numbers the server's pipe had
    try:
        os.set_blocking(read, False)
        server.stop()
        with pytest.raises(BlockingIOError):
            os.read(read, 1)
    finally:
        os.close(read)
        os.close(write)
