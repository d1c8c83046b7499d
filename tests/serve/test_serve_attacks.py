"""`agentbox serve` against hostile and odd clients: smuggling, slow clients, HTTP/1.0, framing.

Each test talks to a real server process over loopback with raw sockets, so what
is tested is the bytes on the wire.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from support.serving import Served, events, raw_exchange, read_all

pytestmark = pytest.mark.slow

Serve = Callable[..., Served]
HEAD = b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"


def connect(served: Served, timeout: float = 30) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=timeout)


def timed_health(served: Served) -> float:
    """Seconds /healthz takes to answer 200 on a fresh connection."""
    started = time.monotonic()
    assert served.request("GET", "/healthz").status == 200
    return time.monotonic() - started


def test_a_long_chunk_size_line_smuggles_no_second_request(serve: Serve,
                                                           place: str) -> None:
    # A size line of 1,024 zeros and "45": the server this replaced read 1,024 bytes of
    # it as the last chunk, then served the chunk's data as a request of its own.
    served = serve()
    smuggled = (b"\r\nPOST /hooks/smuggled HTTP/1.1\r\nHost: x\r\nIdempotency-Key: s1\r\n"
                b"Content-Length: 2\r\n\r\n{}")
    answer = raw_exchange(served.port, HEAD % b"c9" + b"Transfer-Encoding: chunked\r\n\r\n"
                          + b"0" * 1024 + b"%x\r\n" % len(smuggled) + smuggled + b"\r\n0\r\n\r\n",
                          read_timeout=10)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # one answer, then the connection closed
    assert b"illegal chunk header" in answer
    assert events(place) == []


@pytest.mark.parametrize("body", [
    b"zz\r\n{}\r\n0\r\n\r\n",  # not hex
    b"2\r\n{}XX0\r\n\r\n",  # no CRLF after the chunk's data
    b"1\r\n{}\r\n0\r\n\r\n",  # more data than the size said
    b"-2\r\n{}\r\n0\r\n\r\n",
    b"2 2\r\n{}\r\n0\r\n\r\n",
    b"0x2\r\n{}\r\n0\r\n\r\n",
    b"1" + b"0" * 20 + b"\r\n",  # a size of 21 digits
])
def test_bad_chunk_encodings_are_400_and_the_connection_closes(serve: Serve, place: str,
                                                               body: bytes) -> None:
    served = serve()
    answer = raw_exchange(served.port, HEAD % b"k" + b"Transfer-Encoding: chunked\r\n\r\n" + body
                          + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", read_timeout=10)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"Connection: close" in answer and answer.count(b"HTTP/1.1 ") == 1, answer
    assert events(place) == []


def test_a_transfer_coding_other_than_chunked_is_refused(serve: Serve) -> None:
    answer = raw_exchange(serve().port, HEAD % b"k" + b"Transfer-Encoding: gzip, chunked\r\n\r\n",
                          read_timeout=10)
    assert answer.startswith(b"HTTP/1.1 501 "), answer


def test_stalled_bodies_hold_no_worker(serve: Serve, place: str) -> None:
    # 40 clients send a whole head and none of the body: with two worker threads, the
    # server this replaced had both waiting on bodies for the whole request timeout.
    served = serve("--threads", "2")
    stalled = [connect(served) for _ in range(40)]
    try:
        for i, sock in enumerate(stalled):
            sock.sendall(HEAD % b"stalled-%d" % i + b"Content-Length: 100\r\n\r\n{\"a\":")
        time.sleep(0.5)
        assert timed_health(served) < 2
        asked = time.monotonic()
        assert served.post("chat", "{}", key="fast").status == 200
        assert time.monotonic() - asked < 2
    finally:
        for sock in stalled:
            sock.close()
    assert [row[2] for row in events(place)] == ["fast"]


def test_stalled_heads_hold_no_worker(serve: Serve) -> None:
    served = serve("--threads", "2")
    stalled = [connect(served) for _ in range(40)]
    try:
        for sock in stalled:
            sock.sendall(b"POST /hooks/chat HTTP/1.1\r\nHost: x\r\nIdempot")
        time.sleep(0.5)
        assert timed_health(served) < 2
    finally:
        for sock in stalled:
            sock.close()


def test_the_deadline_runs_from_the_first_byte_and_trickling_cannot_extend_it(
        serve: Serve) -> None:
    # The head trickles in for 1.5 s of a 2 s deadline, then the body stalls. The server
    # this replaced restarted the clock when a worker took the head: 408 after 3.5 s.
    served = serve("--request-timeout", "2s")
    head = HEAD % b"trickle" + b"Content-Length: 10\r\n\r\n"
    with connect(served) as sock:
        started = time.monotonic()
        for i in range(0, len(head), 4):
            sock.sendall(head[i:i + 4])
            time.sleep(1.5 / (len(head) / 4))
        sock.sendall(b'{"a"')
        answer = read_all(sock)
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert 1.8 <= took < 2.8, took


def test_http_1_0_keep_alive_gets_its_answer_and_a_close(serve: Serve, place: str) -> None:
    # What `ab -k` sends. The server this replaced kept the connection open without
    # saying Connection: keep-alive, so the client waited for an end that never came.
    served = serve()
    for request in (b"GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
                    b"GET /healthz HTTP/1.0\r\n\r\n",
                    b"POST /hooks/chat HTTP/1.0\r\nConnection: keep-alive\r\n"
                    b"Idempotency-Key: old\r\nContent-Length: 2\r\n\r\n{}"):
        with connect(served, timeout=5) as sock:
            sock.sendall(request)
            started = time.monotonic()
            answer = read_all(sock)  # a timeout here is the hang
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        assert b"Connection: close" in answer and b"keep-alive" not in answer.lower(), answer
        assert time.monotonic() - started < 2
    assert [row[2] for row in events(place)] == ["old"]


def test_expect_100_continue_invites_the_body_only_when_it_is_wanted(
        serve: Serve, config: Callable[[str], None], place: str) -> None:
    config("max_payload = 1000\n")
    served = serve()
    with connect(served) as sock:
        sock.sendall(HEAD % b"e1" + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"{}")
        assert sock.recv(1000).startswith(b"HTTP/1.1 200 ")
    answer = raw_exchange(served.port, HEAD % b"e2" + b"Expect: 100-continue\r\n"
                          b"Content-Length: 5000\r\n\r\n", read_timeout=10)
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"100 Continue" not in answer
    assert [row[2] for row in events(place)] == ["e1"]


def test_pipelined_deliveries_with_chunked_bodies(serve: Serve, place: str) -> None:
    served = serve()
    one = HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n4\r\n\": 1\r\n1\r\n}\r\n0\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = raw_exchange(served.port, one % b"p1" + one % b"p2" + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 3, answer
    assert [row[2:] for row in events(place)] == [("p1", '{"a":1}'), ("p2", '{"a":1}')]


def test_a_head_over_the_bound_is_431_however_it_arrives(serve: Serve) -> None:
    served = serve()
    pad = b"X-Pad: " + b"p" * 1000 + b"\r\n"
    whole = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad * 70 + b"\r\n"
    assert raw_exchange(served.port, whole).startswith(b"HTTP/1.1 431 ")
    with connect(served) as sock:  # in pieces, never finished: refused once past the bound
        sock.sendall(whole[:-2])
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer
    assert timed_health(served) < 2


def test_no_line_per_request_unless_asked(serve: Serve) -> None:
    # The server this replaced logged every refused request: 82,961 lines in 10 s of GET /.
    served = serve()
    conn = served.connect()
    for _ in range(100):
        assert served.request("GET", "/", conn=conn).status == 404
        assert served.post("chat", "{not json", conn=conn).status == 400
    conn.close()
    assert served.stop() == 0
    assert [line.split(" ", 2)[1] for line in served.lines] == ["serving", "stopping",
                                                                "stopped"], served.lines


def test_the_access_log_has_one_escaped_line_per_request(serve: Serve) -> None:
    served = serve("--access-log")
    assert served.request("GET", '/a"b?x=1').status == 404
    assert served.post("chat", "{}", key="k").status == 200
    raw_exchange(served.port, b"GET /healthz HTTP/1.1\r\n\r\n")  # no Host: refused unparsed
    assert served.stop() == 0
    import re

    lines = served.lines[1:-2]
    assert len(lines) == 3, served.lines
    pattern = re.compile(r'agentbox: 127\.0\.0\.1 "(\S+) (\S+)" (\d{3}) (\d+) \d+\.\dms')
    found = [pattern.fullmatch(line) for line in lines]
    assert all(found), lines
    assert [m.groups()[:3] for m in found if m] == [
        ("GET", '/a\\"b?x=1', "404"), ("POST", "/hooks/chat", "200"), ("-", "-", "400")]
