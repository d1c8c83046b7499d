"""What an application on agentbox's HTTP server sees and answers.

The server (:mod:`agentbox.httpserver`) calls an application with one whole
:class:`Request`, its body already read within the server's bounds, and
writes the :class:`Response` it returns; raising :class:`HTTPError` answers
a refusal as ``{"error": …}`` JSON. Nothing here touches a socket, so an
application is a plain function of a request, easy to test, and the same
types serve JSON routes (webhooks) and HTML pages with forms and cookies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_FORM = 64 * 1024  # bytes of a form body: an HTML form of a few fields is far less
MAX_FIELDS = 100  # fields of one form or query string

Fields = Sequence[tuple[str, str]]  # response headers, in order; a name may repeat (Set-Cookie)


class HTTPError(Exception):
    """A refusal: ``status``, a one-line message for the client, and any extra headers."""

    def __init__(self, status: int, message: str, headers: Fields = ()) -> None:
        super().__init__(message)
        self.status = status
        self.headers = tuple(headers)


class Headers(Mapping[str, str]):
    """A request's header fields by case-insensitive name, as Latin-1 text (HTTP's own).

    A field sent more than once reads as its values joined by ", ", which
    RFC 9110 makes the same thing; :meth:`get_all` gives them apart, for a
    caller that must refuse a repeated field meant to be single.
    """

    def __init__(self, fields: Iterable[tuple[bytes, bytes]]) -> None:
        self._fields: dict[str, list[str]] = {}
        for name, value in fields:
            self._fields.setdefault(name.decode("ascii").lower(), []).append(
                value.decode("latin-1"))

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._fields[name.lower()])

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def get_all(self, name: str) -> list[str]:
        return list(self._fields.get(name.lower(), ()))


@dataclass(frozen=True)
class Request:
    """One whole request. ``path`` and ``query`` are the target's two parts, still
    percent-encoded: a route decodes what it takes (a source name, a token)."""

    method: str
    path: str
    query: str
    headers: Headers
    body: bytes

    def form(self, limit: int = MAX_FORM) -> dict[str, str]:
        """The body as an HTML form (``application/x-www-form-urlencoded``), each field once.

        Bounded in bytes and in fields; any other content type is 415, a
        malformed body, one over the bounds or a field given twice is 400.
        """
        kind = self.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            raise HTTPError(415, "expected a form (application/x-www-form-urlencoded)")
        if len(self.body) > limit:
            raise HTTPError(413, f"form of {len(self.body)} bytes is over the {limit}-byte limit")
        try:
            text = self.body.decode("ascii")
        except UnicodeDecodeError:
            raise HTTPError(400, "a form body is percent-encoded ASCII") from None
        return _fields(text, "form")

    def query_args(self) -> dict[str, str]:
        """The query string's fields, each once (bounded and checked as :meth:`form`)."""
        return _fields(self.query, "query string")

    def cookies(self) -> dict[str, str]:
        """The cookies the client sent, by name; the first of a repeated name stands
        (RFC 6265 sends the most specific first). Pairs without ``=`` are passed over."""
        found: dict[str, str] = {}
        for header in self.headers.get_all("Cookie"):
            for pair in header.split(";"):
                name, equals, value = pair.strip().partition("=")
                if equals and name:
                    value = value.strip()
                    if len(value) > 1 and value[0] == value[-1] == '"':
                        value = value[1:-1]
                    found.setdefault(name.strip(), value)
        return found


def _fields(text: str, what: str) -> dict[str, str]:
    from urllib.parse import parse_qsl

    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True, encoding="utf-8",
                          errors="strict", max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        raise HTTPError(400, f"the {what} is not UTF-8 once decoded") from None
    except ValueError as exc:  # a field without '=', or too many fields
        raise HTTPError(400, f"malformed {what}: {exc}") from None
    fields = dict(pairs)
    if len(fields) < len(pairs):
        raise HTTPError(400, f"a field is given more than once in the {what}")
    return fields


@dataclass(frozen=True)
class Response:
    """An answer: status, body bytes with their content type, and extra header fields.

    The server adds the framing (Content-Length, Connection) and Date.
    """

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: Fields = ()

    @classmethod
    def json(cls, status: int, doc: Any, headers: Fields = ()) -> Response:
        return cls(status, json.dumps(doc, ensure_ascii=False).encode() + b"\n",
                   "application/json", tuple(headers))

    @classmethod
    def html(cls, status: int, text: str, headers: Fields = ()) -> Response:
        return cls(status, text.encode("utf-8"), "text/html; charset=utf-8", tuple(headers))
