"""`agentbox serve` on the HTTP server it had before h11: the "before" of bench/serve.py.

    python serve_before_h11.py serve --listen 127.0.0.1:0

Runs agentbox's own command line, with agentbox's own webhook application,
sources and store, but with ``agentbox.httpserver.Server`` replaced by the old
server (httpserver_before_h11.py beside this file): so the two runs differ
only in the HTTP layer. The old server handed the application a request whose
body it read on demand and took a JSON document back; the adapter below reads
the body first (the old server's own bounds and deadlines apply) and decodes
the new answer's JSON once, a few microseconds a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpserver_before_h11 as before

import agentbox.httpserver
from agentbox.cli import main
from agentbox.web import Headers, HTTPError, Request, Response


def adapt(app: Callable[[Request], Response], max_body: int) -> before.App:
    def handle(old: before.Request) -> before.Response:
        body = old.body(max_body)
        fields = [(k.encode("ascii"), v.encode("latin-1")) for k, v in old.headers.items()]
        request = Request(old.method, old.path, old.query, Headers(fields), body)
        try:
            response = app(request)
        except HTTPError as exc:
            return before.Response(exc.status, {"error": str(exc)}, dict(exc.headers))
        return before.Response(response.status, json.loads(response.body),
                               dict(response.headers))

    return handle


class BeforeServer(before.Server):
    """The old server, taking what `agentbox serve` gives the new one."""

    def __init__(self, address: tuple[str, int], app: Callable[[Request], Response], *,
                 max_body: int, access_log: Any = None, **options: Any) -> None:
        super().__init__(address, adapt(app, max_body), **options)


if __name__ == "__main__":
    agentbox.httpserver.Server = BeforeServer
    main()
