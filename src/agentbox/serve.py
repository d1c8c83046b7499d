"""`agentbox serve`: webhooks over HTTP into one user's inbox.

Routes: ``POST /hooks/{source}`` takes one delivery, ``GET /healthz`` says the
server is up, ``GET|POST /a/TOKEN`` are the pages of approval links
(:mod:`agentbox.approval_pages`) and ``/static/agentbox.css`` their stylesheet.
A delivery goes through :mod:`agentbox.delivery`, the same path as
``agentbox ingest``, and is answered only once its transaction committed:

====  =====================================================================
200   ``{"outcome": "stored"|"duplicate", "id", "source", "source_id"}``
400   not a JSON object (or too deep, not UTF-8, …), no delivery id (its
      header missing, empty or repeated; its body field missing or no
      string), or a malformed request
401   a required signature is missing or does not match
403   a source agentbox writes itself (``approval``, ``timer``)
404   no such route; 405 a route that does not take this method
408   the request did not arrive whole within the request timeout
409   conflict: the key is stored with another payload, which stands
413   a body over ``max_payload``
503   the database stayed busy (with ``Retry-After``)
====  =====================================================================

A source's delivery id comes from a header or from a field of the JSON body
(:mod:`agentbox.sources`); either way a required signature is checked over
the raw bytes before anything is parsed.

The server (:mod:`agentbox.httpserver`) runs the application in a bounded pool
of threads; each thread has its own store, made by the factory it was given,
so no connection is ever shared between threads. Their writes (deliveries,
answers through links) are committed in groups (:mod:`agentbox.groupcommit`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote
from zoneinfo import ZoneInfo

from agentbox import delivery
from agentbox.approval_pages import PREFIX, ApprovalPages
from agentbox.errors import AgentboxError, BadInput, Busy, SignatureMismatch
from agentbox.groupcommit import GroupCommit
from agentbox.jsonutil import type_name
from agentbox.pages import STYLESHEET, stylesheet
from agentbox.sources import Source
from agentbox.web import HTTPError, Request, Response

if TYPE_CHECKING:
    from agentbox.ledger.store import Store
    from agentbox.rules.records import IngestResult
    from agentbox.signatures import Check

HOOKS = "/hooks/"


class WebhookApp:
    """The routes of ``agentbox serve``; called by the server's worker threads."""

    def __init__(self, open_store: Callable[[], Store], sources: Mapping[str, Source],
                 secrets: Mapping[str, bytes], max_payload: int, clock: Callable[[], int],
                 busy_timeout: float, log: Callable[[str], None], user: str = "",
                 zone: ZoneInfo | None = None) -> None:
        self._open_store = open_store
        self._sources = dict(sources)
        self._secrets = dict(secrets)
        self._max_payload = max_payload
        self._clock = clock
        self._retry_after = max(1, math.ceil(busy_timeout))
        self._commit = GroupCommit(busy_timeout)
        self._log = log
        self._local = threading.local()
        self._stores: list[Store] = []
        self._stores_lock = threading.Lock()
        self._links = ApprovalPages(self.store, user, zone or ZoneInfo("UTC"), clock,
                                    self._commit, log, self._retry_after)

    def __call__(self, request: Request) -> Response:
        if request.path == "/healthz":
            _allow(request, "GET", "HEAD")
            return Response.json(200, {"status": "ok"})
        if request.path.startswith(PREFIX):
            return self._links(request)
        if request.path == STYLESHEET:
            _allow(request, "GET", "HEAD")
            return stylesheet()
        if request.path.startswith(HOOKS) and "/" not in request.path[len(HOOKS):] \
                and len(request.path) > len(HOOKS):
            _allow(request, "POST")
            return self._deliver(request, request.path[len(HOOKS):])
        raise HTTPError(404, f"no route {request.path}; deliveries go to POST /hooks/SOURCE")

    def store(self) -> Store:
        """This thread's own store, opened on its first delivery."""
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._open_store()
            self._local.store = store
            with self._stores_lock:
                self._stores.append(store)
        return store

    def close(self) -> None:
        """Close every thread's store; called once the workers are gone."""
        with self._stores_lock:
            for store in self._stores:
                store.close()
            self._stores.clear()

    def _deliver(self, request: Request, quoted: str) -> Response:
        try:
            source = unquote(quoted, errors="strict")
        except UnicodeDecodeError:
            raise HTTPError(400, "the source in the path is not valid UTF-8") from None
        if delivery.is_reserved(source):
            raise HTTPError(403, f"source {source!r} is agentbox's own; it takes no deliveries")
        settings = self._sources.get(source, Source())
        source_id: delivery.SourceId
        if settings.id_field is not None:
            source_id = _field_reader(settings.id_field)
        else:
            assert settings.id_header is not None
            header = _header_text(request, settings.id_header)
            if not header:
                raise HTTPError(400, f"no delivery id: the {settings.id_header} header is "
                                "missing or empty")
            source_id = header
        now = self._clock()
        check = self._signature_check(request, source, settings, now)
        try:
            result = delivery.accept(self.store, source, source_id, request.body,
                                     max_payload=self._max_payload, now=now, check=check,
                                     commit=self._commit)
        except SignatureMismatch as exc:
            raise HTTPError(401, str(exc)) from None
        except BadInput as exc:
            raise HTTPError(400, str(exc)) from None
        except Busy:
            self._log(f"a delivery for {source} waited too long for the database; "
                      "answered 503")
            raise HTTPError(503, "the database stayed busy; try again",
                            [("Retry-After", str(self._retry_after))]) from None
        except AgentboxError as exc:
            self._log(f"cannot store a delivery for {source}: {exc}")
            raise HTTPError(500, "the delivery could not be stored") from None
        return _outcome(result)

    def _signature_check(self, request: Request, source: str, settings: Source,
                         now: int) -> Check | None:
        """The check a delivery's body must pass, made before the body is read."""
        if settings.signature is None:
            return None
        from agentbox.signatures import STRIPE_TOLERANCE, Check

        assert settings.signature_header is not None
        given = _header_text(request, settings.signature_header)
        if not given:
            raise HTTPError(401, f"a signature is required: the {settings.signature_header} "
                            "header is missing")
        try:
            return Check(given, self._secrets[source], now, settings.signature,
                         settings.tolerance or STRIPE_TOLERANCE)
        except SignatureMismatch as exc:
            raise HTTPError(401, str(exc)) from None


def _allow(request: Request, *methods: str) -> None:
    if request.method not in methods:
        raise HTTPError(405, f"{request.path} takes {' or '.join(methods)}",
                        [("Allow", ", ".join(methods))])


def _header_text(request: Request, name: str) -> str | None:
    """A header's value as the UTF-8 text its sender meant (HTTP hands over Latin-1).

    An id or a signature is one value: the header given twice is refused,
    rather than one of its values picked.
    """
    values = request.headers.get_all(name)
    if not values:
        return None
    if len(values) > 1:
        raise HTTPError(400, f"the {name} header is given more than once")
    try:
        return values[0].strip().encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPError(400, f"the {name} header is not valid UTF-8") from None


def _field_reader(path: str) -> Callable[[dict[str, Any]], str]:
    """Finds the delivery id at ``path`` (``a.b``: field b of object a) in a parsed body."""
    names = path.split(".")

    def find(payload: dict[str, Any]) -> str:
        value: Any = payload
        for name in names:
            if not isinstance(value, dict) or name not in value:
                raise BadInput(f"no delivery id: the body has no field {path!r}")
            value = value[name]
        if not isinstance(value, str):
            raise BadInput(f"no delivery id: the body's field {path!r} is "
                           f"{type_name(value)}, not a string")
        if not value:
            raise BadInput(f"no delivery id: the body's field {path!r} is empty")
        return value

    return find


def _outcome(result: IngestResult) -> Response:
    doc: dict[str, Any] = {"outcome": result.outcome, "id": result.id,
                           "source": result.source, "source_id": result.source_id}
    if result.outcome == "conflict":
        doc["error"] = (f"{result.source}/{result.source_id} is event {result.id} with a "
                        "different payload; the first stands")
        return Response.json(409, doc)
    return Response.json(200, doc)
