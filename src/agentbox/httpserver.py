"""The HTTP/1.1 server under ``agentbox serve``: h11 frames, one loop reads, workers answer.

Its work per request is short (parse a small body, one durable write), so a
bounded pool of threads fits; what needs care is everything around it:

* **Framing is h11's.** Request lines, headers, Content-Length, chunked
  bodies, trailers, keep-alive and ``Expect: 100-continue`` are parsed by
  h11, a maintained sans-IO HTTP/1.1 implementation; agentbox frames
  nothing itself. (The server this replaced read chunk sizes itself, and a
  size line longer than it looked at let a second request be smuggled in.)
* **One loop reads whole requests.** The caller's thread owns the listening
  socket and every connection, all non-blocking, under ``selectors``. It
  reads a request, head *and* body, and only a complete one goes to a
  worker; the loop also writes every answer. So a worker never waits on a
  client: any number of slow clients cost a socket each, never a thread.
* **One deadline per request.** ``request_timeout`` runs from the request's
  first byte (for a new connection, from its accept) to its last, however it
  trickles; past it the answer is 408. ``idle_timeout`` closes a kept-alive
  connection between requests, ``write_timeout`` one that does not read its
  answer. Heads are bounded (``max_head``), bodies too (``max_body``: 413 as
  soon as a declared length or the chunks so far pass it), and so are open
  connections (``max_connections``; past it a new one is answered 503).
* **Stopping** (:meth:`Server.stop`, safe from a signal handler) closes the
  listener and idle connections at once, lets every request under way
  finish (its answer says ``Connection: close``), and returns from
  :meth:`Server.serve` when the last connection is gone.

A connection that is to close after its answer is half-closed and drained
for a moment (``LINGER``) before it is closed, so that the client reads the
answer instead of a reset, even when it is still sending a refused body.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from http import HTTPStatus

import h11

from agentbox.web import Headers, HTTPError, Request, Response

MAX_HEAD = 64 * 1024  # bytes of request line and headers (and of a chunk-size line, a trailer)
LINGER = 1.0  # seconds a closing connection is drained, so its client can read the answer
LINGER_BYTES = 4 * 1024 * 1024  # ... and at most this much of it
TICK = 0.1  # seconds between deadline sweeps: deadlines hold to about this
RECV = 64 * 1024

App = Callable[[Request], Response]
_READ, _WORK, _WRITE, _LINGER, _CLOSED = range(5)  # a connection's state
_WAKE = object()
_FOREVER = float("inf")


class _Conn:
    """One client connection: its socket, its h11 state, the request being read."""

    __slots__ = ("begun", "body", "deadline", "drained", "events", "fields", "h11", "method",
                 "out", "peer", "sock", "started", "state", "target")

    def __init__(self, sock: socket.socket, peer: str, max_head: int, now: float,
                 timeout: float) -> None:
        self.sock = sock
        self.peer = peer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self.state = _READ
        self.events = 0  # what the selector watches it for
        self.out = memoryview(b"")  # answer bytes not yet sent
        self.drained = 0
        self.reset(now, now + timeout)

    def reset(self, started: float | None, deadline: float) -> None:
        """Ready for a request: when its clock started (None: not yet), its deadline."""
        self.started = started
        self.deadline = deadline
        self.begun = False  # a byte of it has come
        self.fields: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.method = self.target = "-"


class Server:
    """Serve ``app`` on ``address`` until :meth:`stop`; see the module docstring."""

    def __init__(self, address: tuple[str, int], app: App, *, max_body: int,
                 threads: int = 16, max_connections: int = 512, max_head: int = MAX_HEAD,
                 request_timeout: float = 10.0, idle_timeout: float = 30.0,
                 write_timeout: float = 10.0, log: Callable[[str], None] = lambda _: None,
                 access_log: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.max_body = max_body
        self.threads = threads
        self.max_connections = max_connections
        self.max_head = max_head
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.write_timeout = write_timeout
        self.log = log
        self.access_log = access_log
        self.stopping = False
        self._why: str | None = None
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(1024)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pipe_lock = threading.Lock()  # the pipe is never written once closed (-1)
        self._selector = selectors.DefaultSelector()
        self._conns: set[_Conn] = set()
        self._answered: deque[tuple[_Conn, bytes | None]] = deque()  # from the workers
        self._listening = True
        self._accepting_at = 0.0  # after an accept error, when to try again
        self._full = False  # turning connections away (said once, not per connection)
        self._pool: ThreadPoolExecutor | None = None

    def stop(self, why: str | None = None) -> None:
        """Ask :meth:`serve` to wind down; safe from a signal handler or another thread.

        ``why``, if given, is logged once, by the loop, as it begins to.
        """
        if not self.stopping:
            self._why = why
        self.stopping = True
        self._wake(blocking=False)

    def _wake(self, blocking: bool) -> None:
        """Nudge the loop out of ``select``. Once :meth:`serve` has closed the pipe this
        does nothing: its number may name another file by then. ``blocking=False`` (for
        :meth:`stop`, which a signal may call while this thread holds the lock) skips the
        write when the lock is taken: a wake or the closing is under way already."""
        if not self._pipe_lock.acquire(blocking=blocking):
            return
        try:
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._wake_w, b"x")
        finally:
            self._pipe_lock.release()

    def serve(self) -> None:
        """Run until stopped and every request under way is answered."""
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        next_sweep = 0.0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="agentbox-serve") as pool:
            self._pool = pool
            while self._listening or self._conns:
                if self.stopping and self._listening:
                    self._stop_listening()
                for key, mask in self._selector.select(TICK):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        with contextlib.suppress(BlockingIOError):
                            os.read(self._wake_r, 4096)
                    else:
                        self._ready(key.data, mask)
                while self._answered:
                    self._answer(*self._answered.popleft())
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + TICK
                    self._sweep(now)
        self._selector.close()
        with self._pipe_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_w = -1

    # -- connections --------------------------------------------------------------

    def _stop_listening(self) -> None:
        if self._why is not None:
            self.log(self._why)
        self._listening = False
        if self._accepting_at == 0.0:
            self._selector.unregister(self._listener)
        self._listener.close()
        for conn in [c for c in self._conns if c.state == _READ and not c.begun]:
            self._close(conn)

    def _accept(self) -> None:
        now = time.monotonic()
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, for one: try again in a moment
                self.log(f"cannot accept a connection: {exc.strerror or exc}")
                self._selector.unregister(self._listener)
                self._accepting_at = now + TICK
                return
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if len(self._conns) >= self.max_connections:
                self._turn_away(sock)
                continue
            self._full = False
            conn = _Conn(sock, str(peer[0]), self.max_head, now, self.request_timeout)
            self._conns.add(conn)
            self._watch(conn)

    def _turn_away(self, sock: socket.socket) -> None:
        """Answer 503 to a connection past the bound, as far as one send goes, and close it."""
        if not self._full:
            self._full = True
            self.log(f"turning connections away: {len(self._conns)} are open, the most "
                     "it keeps")
        data = _frame(h11.Connection(h11.SERVER), "-",
                      Response.json(503, {"error": "too many connections; try again"}), True)
        with contextlib.suppress(OSError):
            sock.send(data)
        sock.close()

    def _watch(self, conn: _Conn, reading: bool | None = None) -> None:
        """Have the selector watch ``conn`` for what its state and unsent bytes need.

        While a request is answered, its connection stays watched for reading
        if it was (a client waiting for its answer sends nothing, and saves
        two system calls a request): only when something comes after all is
        it left unwatched, ``reading=False``, until the answer is out.
        """
        read, write = selectors.EVENT_READ, selectors.EVENT_WRITE
        if reading is None:
            reading = (conn.state in (_READ, _LINGER)
                       or bool(conn.state in (_WORK, _WRITE) and conn.events & read))
        events = (read if reading else 0) | (write if conn.out else 0)
        if events == conn.events:
            return
        if not conn.events:
            self._selector.register(conn.sock, events, conn)
        elif not events:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        if conn.events:
            self._selector.unregister(conn.sock)
        conn.events = 0
        conn.state = _CLOSED
        conn.sock.close()
        self._conns.discard(conn)

    def _ready(self, conn: _Conn, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        if mask & selectors.EVENT_READ and conn.state in (_WORK, _WRITE):
            self._watch(conn, reading=False)  # sent ahead of its answer: read it after
        elif mask & selectors.EVENT_READ and conn.state in (_READ, _LINGER):
            try:
                data = conn.sock.recv(RECV)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the client is gone (or sends no more): nothing left to answer
                self._close(conn)
            elif conn.state == _LINGER:
                conn.drained += len(data)
                if conn.drained > LINGER_BYTES:
                    self._close(conn)
            else:
                self._receive(conn, data)

    def _sweep(self, now: float) -> None:
        if self._accepting_at and now >= self._accepting_at and self._listening:
            self._accepting_at = 0.0
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        for conn in [c for c in self._conns if c.deadline <= now]:
            if conn.state == _READ and conn.begun:
                self._refuse(conn, 408, "the request did not arrive whole in time")
            else:  # idle, not reading its answer, or done lingering
                self._close(conn)

    # -- reading a request ----------------------------------------------------------

    def _receive(self, conn: _Conn, data: bytes) -> None:
        if conn.started is None:  # a kept-alive connection's next request begins
            conn.started = time.monotonic()
            conn.deadline = conn.started + self.request_timeout
        conn.begun = True
        conn.h11.receive_data(data)
        self._advance(conn)

    def _advance(self, conn: _Conn) -> None:
        """Take every event h11 finds in what came; a whole request goes to a worker."""
        while conn.state == _READ:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                # h11 quotes what it refused; the client sent it and the log need not hold it
                detail = _QUOTED.split(str(exc))[0] or "malformed request"
                self._refuse(conn, exc.error_status_hint, detail)
                return
            if isinstance(event, h11.Request):
                self._head(conn, event)
            elif isinstance(event, h11.Data):
                conn.body += event.data
                if len(conn.body) > self.max_body:
                    self._refuse(conn, 413, f"body is over the {self.max_body}-byte limit")
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch(conn)
            elif isinstance(event, h11.ConnectionClosed):
                self._close(conn)
            else:  # NEED_DATA; PAUSED cannot come before the request's end
                return

    def _head(self, conn: _Conn, event: h11.Request) -> None:
        """Refuse at once what the head alone shows: unsupported, ambiguous, too large."""
        conn.method = event.method.decode("ascii")
        conn.target = event.target.decode("ascii")
        conn.fields = fields = list(event.headers)
        names = {name for name, _ in fields}
        length = next((int(v) for n, v in fields if n == b"content-length"), None)
        # h11 bounds a head still arriving; one that came whole in a read is measured here
        size = len(event.method) + len(event.target) + sum(len(n) + len(v) + 4
                                                           for n, v in fields)
        if size > self.max_head:
            self._refuse(conn, 431, "request head too large")
        elif event.http_version not in (b"1.0", b"1.1"):
            self._refuse(conn, 505, f"HTTP/{event.http_version.decode()} is not supported")
        elif b"transfer-encoding" in names and length is not None:
            self._refuse(conn, 400, "both Content-Length and Transfer-Encoding given")
        elif length is not None and length > self.max_body:
            self._refuse(conn, 413, f"body of {length} bytes is over the {self.max_body}-byte "
                         "limit")
        elif conn.h11.they_are_waiting_for_100_continue:
            invitation = h11.InformationalResponse(status_code=100, headers=[],
                                                   reason="Continue")
            self._send(conn, conn.h11.send(invitation) or b"")

    def _dispatch(self, conn: _Conn) -> None:
        conn.state = _WORK
        conn.deadline = _FOREVER  # the application bounds its own time (the busy timeout)
        self._watch(conn)
        path, _, query = conn.target.partition("?")
        if not path.startswith("/"):  # absolute-form, as a proxy may send it
            from urllib.parse import urlsplit

            path = urlsplit(conn.target).path or "/"
        request = Request(conn.method, path, query, Headers(conn.fields), bytes(conn.body))
        assert self._pool is not None
        # A 100 Continue still unsent goes first: then the loop writes the answer too.
        self._pool.submit(self._work, conn, request, not conn.out)

    # -- answering ------------------------------------------------------------------

    def _work(self, conn: _Conn, request: Request, send: bool) -> None:
        """In a worker: the application's answer, framed, and sent if ``send`` and the
        socket takes it; the loop writes the rest and goes on with the connection."""
        data: bytes | None = None
        try:
            try:
                response = self.app(request)
            except HTTPError as exc:
                response = Response.json(exc.status, {"error": str(exc)}, exc.headers)
            except Exception as exc:  # the last line of defence: answer 500, say why
                self.log(f"{request.method} {request.path}: unexpected error: "
                         f"{type(exc).__name__}: {exc}")
                response = _INTERNAL
            try:
                data = _frame(conn.h11, request.method, response, self.stopping)
            except h11.LocalProtocolError as exc:  # a header h11 will not send
                self.log(f"{request.method} {request.path}: cannot send the answer: {exc}")
                response = _INTERNAL
                data = _frame(conn.h11, request.method, response, True)
            self._access(conn, response.status, len(response.body))
            if send:  # at once, rather than after the loop's next turn at the GIL
                data = data[conn.sock.send(data):]
        except BlockingIOError:
            pass
        except OSError:  # the client is gone
            data = None
        except Exception as exc:
            self.log(f"unexpected error answering {request.method} {request.path}: "
                     f"{type(exc).__name__}: {exc}")
            data = None
        self._answered.append((conn, data))
        self._wake(blocking=True)

    def _answer(self, conn: _Conn, data: bytes | None) -> None:
        """Write what is left of an answer (maybe nothing), then go on; None: close."""
        if data is None:
            self._close(conn)
            return
        conn.state = _WRITE
        conn.deadline = time.monotonic() + self.write_timeout
        if data or conn.out:
            self._send(conn, data)
        else:
            self._written(conn)

    def _refuse(self, conn: _Conn, status: int, message: str) -> None:
        """Answer a request the loop will not hand on, then close the connection."""
        response = Response.json(status, {"error": message})
        try:
            data = _frame(conn.h11, conn.method, response, True)
        except h11.LocalProtocolError:  # no answer fits where the exchange is
            self._close(conn)
            return
        self._access(conn, status, len(response.body))
        self._answer(conn, data)

    def _send(self, conn: _Conn, data: bytes) -> None:
        conn.out = memoryview(bytes(conn.out) + data) if conn.out else memoryview(data)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out and conn.state == _WRITE:
            self._written(conn)
        else:
            self._watch(conn)

    def _written(self, conn: _Conn) -> None:
        """An answer is sent: on to the next request, or close."""
        now = time.monotonic()
        if self.stopping or not (conn.h11.our_state is conn.h11.their_state is h11.DONE):
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(conn)
                return
            conn.state = _LINGER
            conn.deadline = now + LINGER
            self._watch(conn)
            return
        conn.h11.start_next_cycle()
        conn.state = _READ
        if conn.h11.trailing_data[0]:  # pipelined: its clock starts now
            conn.reset(now, now + self.request_timeout)
            conn.begun = True
            self._advance(conn)
        else:
            conn.reset(None, now + self.idle_timeout)
        if conn.state == _READ:
            self._watch(conn)

    def _access(self, conn: _Conn, status: int, size: int) -> None:
        if self.access_log is not None:
            took = (time.monotonic() - (conn.started or time.monotonic())) * 1000
            target = conn.target.replace("\\", "\\\\").replace('"', '\\"')  # h11 allows both
            self.access_log(f'{conn.peer} "{conn.method} {target}" {status} {size} {took:.1f}ms')


_INTERNAL = Response.json(500, {"error": "internal error"})
_QUOTED = re.compile(r":? (?:bytearray\()?b['\"]")


def _frame(conn: h11.Connection, method: str, response: Response, close: bool) -> bytes:
    """``response`` as the bytes h11 frames it (HEAD: the head alone)."""
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = ""
    fields = [("Date", formatdate(usegmt=True)), ("Content-Length", str(len(response.body)))]
    if response.content_type is not None:
        fields.append(("Content-Type", response.content_type))
    fields += response.headers
    if close:
        fields.append(("Connection", "close"))
    head = h11.Response(status_code=response.status, headers=fields, reason=reason)
    data = conn.send(head) or b""
    if response.body and method != "HEAD":
        data += conn.send(h11.Data(data=response.body)) or b""
    return data + (conn.send(h11.EndOfMessage()) or b"")
