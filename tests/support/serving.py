"""A real `agentbox serve` process on a free loopback port, and a real HTTP client for it."""

from __future__ import annotations

import http.client
import json
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import is_url
from support.clock import T0_2023
from support.processes import proc_env, wait_for

_SERVING = re.compile(r"on http://[^/\s]+:(\d+)/")


def events(place: str, user: str = "alice") -> list[tuple[Any, ...]]:
    """Every event stored in the user's inbox at the test's ``place`` (see the fixture):
    id, source, source id and payload, in order; [] where there is no inbox. Read
    without making anything."""
    query = """SELECT e.id, e.source, e.source_id, e.payload FROM events e
               JOIN inboxes i ON i.id = e.inbox_id WHERE i.name = {} ORDER BY e.id"""
    if is_url(place):
        import psycopg

        from agentbox.backends.postgres.url import parse

        target = parse(place)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path = {target.schema}")
            try:
                return [tuple(r) for r in conn.execute(query.format("%s"), (user,))]
            except psycopg.errors.UndefinedTable:
                return []
    path = Path(place) / f"{user}.sqlite3"
    if not path.exists():
        return []
    conn = sqlite3.connect(path)
    try:  # a file holds one inbox: its row has no name
        return conn.execute("SELECT id, source, source_id, payload FROM events "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, read_timeout: float = 30) -> bytes:
    """Send raw bytes on a fresh connection; everything the server answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        sock.sendall(data)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    """What ``sock`` receives until the server closes it (a reset ends it too)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


@dataclass
class Reply:
    """What the server answered: status, JSON body (None when empty), headers."""

    status: int
    doc: Any
    headers: dict[str, str]


@dataclass
class Served:
    """One server process: its port, its stderr lines so far, and ways to talk to it."""

    proc: subprocess.Popen[str]
    port: int = 0
    lines: list[str] = field(default_factory=list)

    def connect(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(self, source: str, body: str | bytes, key: str | None = "d-1",
             headers: Mapping[str, str] | None = None,
             conn: http.client.HTTPConnection | None = None) -> Reply:
        sent = dict(headers or {})
        if key is not None:
            sent.setdefault("Idempotency-Key", key)
        return self.request("POST", f"/hooks/{source}", body, sent, conn)

    def request(self, method: str, path: str, body: str | bytes | None = None,
                headers: Mapping[str, str] | None = None,
                conn: http.client.HTTPConnection | None = None) -> Reply:
        own = conn is None
        client = conn or self.connect()
        try:
            client.request(method, path, body=body, headers=dict(headers or {}))
            response = client.getresponse()
            raw = response.read()
            return Reply(response.status, json.loads(raw) if raw else None,
                          {k.lower(): v for k, v in response.getheaders()})
        finally:
            if own:
                client.close()

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=timeout)


def start_server(home: Path, *args: str, env: Mapping[str, str] | None = None,
                 port: int = 0, command: str = "serve", host: str = "127.0.0.1") -> Served:
    """Start `python -m agentbox serve` (or ``command``: `console`) on a free port by
    default; wait until it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentbox", command, "--listen", f"{host}:{port}", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**proc_env(home, AGENTBOX_NOW=str(T0_2023)), **(env or {})})
    served = Served(proc)

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            served.lines.append(line.rstrip("\n"))
            found = _SERVING.search(line)
            if found and not served.port:
                served.port = int(found.group(1))

    threading.Thread(target=drain, daemon=True).start()
    wait_for(lambda: served.port or proc.poll() is not None, "the server to listen")
    if not served.port:
        proc.wait(timeout=10)
        pytest.fail(f"serve exited {proc.returncode}: {served.lines}")
    return served


@contextmanager
def servers(home: Path, command: str = "serve") -> Iterator[Callable[..., Served]]:
    """start(*args, env=..., host=...) -> a running server of ``command``; every one
    started is killed when the block ends."""
    started: list[Served] = []

    def start(*args: str, env: Mapping[str, str] | None = None,
              host: str = "127.0.0.1") -> Served:
        served = start_server(home, *args, env=env, command=command, host=host)
        started.append(served)
        return served

    try:
        yield start
    finally:
        for served in started:
            if served.proc.poll() is None:
                served.proc.kill()
                served.proc.wait(timeout=30)
