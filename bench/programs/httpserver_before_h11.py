"""The benchmark's "before": agentbox's HTTP server as it was until it was rebuilt on h11.

Kept only so that bench/serve.py can measure the new server against it in the
same run (programs/serve_before_h11.py runs agentbox serve on it); it is the
file src/agentbox/httpserver.py was, unchanged below this paragraph, bugs
and all (docs/serve.md says which). Nothing in agentbox imports it.

A small HTTP/1.1 server on the standard library: bounded, deadline-driven, stoppable.

This is the server under ``agentbox serve``. Its work per request is short (parse
a small body, one durable SQLite write), so a bounded pool of threads fits; what
needs care is everything around it, and that decided the choice:

* ``http.server.ThreadingHTTPServer`` as it is starts a thread per connection,
  without bound, and holds it while a kept-alive connection idles; its socket
  timeout restarts with every byte, so a client that trickles its request a
  byte at a time (slowloris) keeps a thread for ever.
* The maintained pure-Python servers each miss one thing this command
  promises: waitress reads requests off the worker threads but its timeout is
  for inactivity (a trickle keeps it alive, up to its connection limit) and its
  close() drops queued requests rather than finishing them; cheroot hands a
  connection to a worker as soon as it is readable and bounds it by a socket
  timeout alone. Either would also be a new dependency for every install.

So the parts are the standard library's (``selectors``, sockets, a thread pool,
and ``http.server``'s own request parser, so the HTTP grammar is not ours), put
together this way:

* One loop thread (the caller's) owns the listening socket and every connection
  that is not being answered. It reads without blocking until a connection
  holds a whole request head, and only then hands it to a worker: a slow client
  never holds a worker while it sends its head.
* A worker (at most ``threads`` of them) parses the head, reads the body under
  the same deadline, calls the application, writes the answer in one send, and
  gives the connection back to the loop for the next request (keep-alive) or
  closes it.
* Deadlines: ``request_timeout`` for a whole request, head and body, from its
  first byte, however it trickles (and for a new connection to begin one);
  ``idle_timeout`` for a kept-alive connection between requests. At most
  ``max_connections`` are open; past that a new one is answered 503 and closed.
* :meth:`Server.stop` (safe from a signal handler) stops accepting at once,
  closes idle connections, lets every started request finish (its answer says
  ``Connection: close``), and makes :meth:`Server.serve` return.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.message import Message
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

MAX_HEAD = 64 * 1024  # bytes of request line and headers together
LINGER = 1.0  # seconds to drain a refused body, so the client can read the refusal


class HTTPError(Exception):
    """An answer that is a refusal: ``status``, a message, and any extra headers."""

    def __init__(self, status: int, message: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


@dataclass
class Response:
    status: int
    doc: Any  # sent as JSON
    headers: dict[str, str] = field(default_factory=dict)


_HEAD, _MORE, _CLOSE = object(), object(), object()  # what a read left a parked connection with


class _Gone(Exception):
    """The client went away (or stopped sending) in the middle of a request."""


class _Conn:
    """One client connection: its socket, its unread bytes, its current deadline."""

    __slots__ = ("buf", "deadline", "peer", "sock", "write_timeout")

    def __init__(self, sock: socket.socket, peer: Any, write_timeout: float) -> None:
        self.sock = sock
        self.peer = peer
        self.buf = bytearray()
        self.deadline = 0.0
        self.write_timeout = write_timeout

    # -- what http.server's parser and the body reader call (rfile and wfile) --

    def _fill(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def _take(self, n: int) -> bytes:
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def readline(self, limit: int = -1) -> bytes:
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0 and (limit < 0 or end < limit):
                return self._take(end + 1)
            if 0 <= limit <= len(self.buf):
                return self._take(limit)
            start = len(self.buf)
            if not self._fill():
                return self._take(len(self.buf))

    def read(self, n: int) -> bytes:
        while len(self.buf) < n and self._fill():
            pass
        return self._take(n)

    def write(self, data: bytes) -> None:
        self.sock.settimeout(self.write_timeout)
        self.sock.sendall(data)

    def flush(self) -> None:
        pass

    # -- for the loop --

    def head_complete(self) -> bool:
        return b"\r\n\r\n" in self.buf or b"\n\n" in self.buf

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def linger_close(self) -> None:
        """Close after a refusal whose request was not read whole.

        Closing with unread bytes would reset the connection, and the client
        could lose the answer already sent; so stop sending, drain what it
        still sends for a moment, then close.
        """
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER
            drained = 0
            while drained < 4 * 1024 * 1024 and (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        self.close()


class Request:
    """What the application sees of one request; the body is read only when asked for."""

    def __init__(self, handler: _Handler) -> None:
        self._handler = handler
        self.method: str = handler.command
        target = handler.path
        self.path, _, self.query = target.partition("?")
        self.headers: Message = handler.headers
        self.peer = handler.client_address
        self.body_read = False

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    @property
    def has_body(self) -> bool:
        return ("Transfer-Encoding" in self.headers
                or self.headers.get("Content-Length", "0").strip() not in ("", "0"))

    def body(self, limit: int) -> bytes:
        """The whole body, refused (413) as soon as it is known to pass ``limit`` bytes.

        A declared Content-Length over the limit is refused before a byte of
        the body is read; a chunked body once its chunks add up past it.
        """
        conn = self._handler.conn
        lengths = self.headers.get_all("Content-Length") or []
        coding = self.headers.get("Transfer-Encoding")
        try:
            if coding is not None:
                if lengths:
                    raise HTTPError(400, "both Content-Length and Transfer-Encoding given")
                if coding.strip().lower() != "chunked":
                    raise HTTPError(400, f"unsupported Transfer-Encoding {coding!r}")
                self._handler.send_continue()
                data = _read_chunked(conn, limit)
            elif lengths:
                values = {v.strip() for v in lengths}
                text = values.pop()
                if values or not (text.isascii() and text.isdigit()):
                    raise HTTPError(400, "Content-Length is not one whole number")
                size = int(text)
                if size > limit:
                    raise HTTPError(413, f"body of {size} bytes is over the {limit}-byte limit")
                self._handler.send_continue()
                data = conn.read(size)
                if len(data) < size:
                    raise _Gone
            else:
                data = b""
        except TimeoutError:
            raise HTTPError(408, "the request did not arrive in time") from None
        self.body_read = True
        return data


def _read_chunked(conn: _Conn, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = conn.readline(1024)
        if not line:
            raise _Gone
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or not all(c in b"0123456789abcdefABCDEF" for c in size_text):
            raise HTTPError(400, "malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limit:
            raise HTTPError(413, f"chunked body is over the {limit}-byte limit")
        data = conn.read(size)
        if len(data) < size:
            raise _Gone
        parts.append(data)
        if conn.read(2) != b"\r\n":
            raise HTTPError(400, "malformed chunk")
    for _ in range(100):  # trailers, read and ignored
        line = conn.readline(8192)
        if not line:
            raise _Gone
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
    raise HTTPError(400, "too many trailer lines")


App = Callable[[Request], Response]


class _Handler(BaseHTTPRequestHandler):
    """http.server's parser for one request on a connection the server manages.

    Only the parsing is BaseHTTPRequestHandler's: the socket, the deadlines,
    the answer's framing and the connection's life are the server's.
    """

    protocol_version = "HTTP/1.1"

    def __init__(self, conn: _Conn, server: Server) -> None:  # no socketserver set-up
        self.conn = conn
        self.rfile = conn  # type: ignore[assignment]
        self.wfile = conn  # type: ignore[assignment]
        self.client_address = conn.peer
        self.owner = server
        self.close_connection = True
        self.request_version = "HTTP/0.9"  # until parse_request knows better
        self.command = ""
        self.unread = False  # a body may still be arriving: close gently
        self._expects_continue = False

    def handle_expect_100(self) -> bool:
        # Deferred until the body is wanted: a refused request gets its refusal
        # instead of an invitation to send a body that will not be read.
        self._expects_continue = True
        return True

    def send_continue(self) -> None:
        if self._expects_continue:
            self._expects_continue = False
            self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, huge headers), in JSON."""
        self.close_connection = True
        self.owner.log(f"refused a malformed request ({code}): {message}")
        self.answer(code, {"error": message or HTTPStatus(code).phrase})

    def answer(self, status: int, doc: Any, headers: Mapping[str, str] | None = None) -> None:
        """The whole answer in one send: status line, headers, JSON body."""
        body = b"" if doc is None else json.dumps(doc, ensure_ascii=False).encode() + b"\n"
        if self.owner.stopping:
            self.close_connection = True
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
                 f"Date: {formatdate(usegmt=True)}",
                 "Content-Type: application/json",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.conn.write(head + (b"" if self.command == "HEAD" else body))

    def run(self, app: App) -> bool:
        """Answer one request; whether the connection may carry another."""
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline:
            raise _Gone
        if len(self.raw_requestline) > 65536:
            self.send_error(414, "request line too long")
            return False
        if not self.parse_request():
            self.unread = True
            return False
        request = Request(self)
        try:
            response = app(request)
        except HTTPError as exc:
            response = Response(exc.status, {"error": str(exc)}, exc.headers)
        if response.status >= 400:
            self.owner.log(f"{self.command} {request.path} {response.status}: "
                           f"{response.doc.get('error') if isinstance(response.doc, dict) else ''}")
        if request.has_body and not request.body_read:
            self.close_connection = self.unread = True
        self.answer(response.status, response.doc, response.headers)
        return not self.close_connection


class Server:
    """Serve ``app`` on ``address`` until :meth:`stop`; see the module docstring."""

    def __init__(self, address: tuple[str, int], app: App, *, threads: int = 16,
                 max_connections: int = 512, request_timeout: float = 10.0,
                 idle_timeout: float = 30.0, write_timeout: float = 10.0,
                 log: Callable[[str], None] = lambda _: None) -> None:
        self.app = app
        self.threads = threads
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.log = log
        self.stopping = False
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(256)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._returned: deque[_Conn] = deque()
        self._open = 0  # connections open, parked or with a worker
        self._lock = threading.Lock()

    def stop(self) -> None:
        """Ask :meth:`serve` to wind down; safe from a signal handler or another thread."""
        self.stopping = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def serve(self) -> None:
        """Run until stopped and every started request is answered."""
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        parked: dict[_Conn, None] = {}
        listening = True
        next_sweep = 0.0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="agentbox-serve") as pool:

            def park(conn: _Conn, fresh: bool = False) -> None:
                # A new connection, or one holding part of its next request, has
                # request_timeout to send it whole; an idle kept-alive one idle_timeout.
                conn.sock.setblocking(False)
                conn.deadline = time.monotonic() + (
                    self.request_timeout if fresh or conn.buf else self.idle_timeout)
                parked[conn] = None
                selector.register(conn.sock, selectors.EVENT_READ, conn)

            def unpark(conn: _Conn) -> None:
                del parked[conn]
                selector.unregister(conn.sock)

            def dispatch(conn: _Conn) -> None:
                unpark(conn)
                pool.submit(self._work, conn)

            while True:
                if self.stopping and listening:
                    listening = False
                    selector.unregister(self._listener)
                    self._listener.close()
                    for conn in [c for c in parked if not c.buf]:
                        unpark(conn)
                        self._close(conn)
                with self._lock:
                    if not listening and self._open == 0:
                        break
                for key, _ in selector.select(timeout=0.25):
                    if key.data is None:
                        for conn in self._accept():
                            park(conn, fresh=True)
                    elif key.data == "wake":
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_r, 4096)
                    else:
                        conn = key.data
                        state = self._receive(conn)
                        if state is _HEAD:
                            dispatch(conn)
                        elif state is _CLOSE:
                            unpark(conn)
                            self._close(conn)
                while self._returned:
                    conn = self._returned.popleft()
                    if self.stopping and not conn.buf:
                        self._close(conn)
                    elif conn.head_complete():
                        pool.submit(self._work, conn)
                    else:
                        park(conn)
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + 0.25
                    for conn in [c for c in parked if c.deadline <= now]:
                        unpark(conn)
                        if conn.buf:
                            self._refuse_raw(conn, 408, "the request did not arrive in time")
                        self._close(conn)
        selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _accept(self) -> list[_Conn]:
        accepted: list[_Conn] = []
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            except OSError as exc:  # out of file descriptors, for one
                self.log(f"cannot accept a connection: {exc}")
                time.sleep(0.1)  # the listener stays readable: do not spin on it
                return accepted
            conn = _Conn(sock, peer, self.write_timeout)
            with self._lock:
                full = self._open >= self.max_connections
                if not full:
                    self._open += 1
            if full:
                self._refuse_raw(conn, 503, "too many connections")
                conn.close()
                continue
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            accepted.append(conn)

    def _receive(self, conn: _Conn) -> object:
        """Read what a parked connection has sent: _HEAD once it holds a whole request
        head, _CLOSE when it is to be closed (it closed, or its head grew too large),
        else _MORE."""
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return _MORE
        except OSError:
            return _CLOSE
        if not data:
            return _CLOSE
        if not conn.buf:  # a request begins: it has request_timeout to arrive whole
            conn.deadline = time.monotonic() + self.request_timeout
        conn.buf += data
        if conn.head_complete():
            return _HEAD
        if len(conn.buf) > MAX_HEAD:
            self._refuse_raw(conn, 431, "request head too large")
            return _CLOSE
        return _MORE

    def _refuse_raw(self, conn: _Conn, status: int, message: str) -> None:
        """A best-effort refusal from the loop, which must never block on a client."""
        body = json.dumps({"error": message}).encode() + b"\n"
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode()
        with contextlib.suppress(OSError):
            conn.sock.setblocking(False)
            conn.sock.send(head + body)

    def _close(self, conn: _Conn) -> None:
        conn.close()
        with self._lock:
            self._open -= 1

    def _work(self, conn: _Conn) -> None:
        """In a worker: answer the requests ``conn`` holds, then hand it back or close it."""
        keep = linger = False
        try:
            while True:
                conn.deadline = time.monotonic() + self.request_timeout
                handler = _Handler(conn, self)
                keep = handler.run(self.app)
                linger = handler.unread
                if not (keep and conn.head_complete()):
                    break
        except (_Gone, TimeoutError, OSError):
            keep = linger = False
        except Exception as exc:  # the last line of defence: answer 500, close
            self.log(f"unexpected error: {type(exc).__name__}: {exc}")
            self._refuse_raw(conn, 500, "internal error")
            keep, linger = False, True
        if keep:
            self._returned.append(conn)
        else:
            if linger:
                conn.linger_close()
            else:
                conn.close()
            with self._lock:
                self._open -= 1
        self._wake()
