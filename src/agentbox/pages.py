"""Server-rendered HTML pages: Jinja2 templates, one stylesheet, the headers they need.

The pages of approval links (``serve``) and of ``agentbox console`` show what
an event's sender wrote: every value is HTML-escaped by Jinja2's autoescape,
on in every template, so a payload holding ``<script>`` shows as text. No
page runs a script; the headers say so to the browser (CSP), keep the pages
out of frames, out of caches, and keep a link's token out of any Referer.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentbox.web import Fields, Response

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    import jinja2

STYLESHEET = "/static/agentbox.css"
SECURITY: Fields = (
    ("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; "
     "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
)


@functools.cache
def _templates() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("agentbox", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.globals["stylesheet"] = STYLESHEET
    return env


@functools.cache
def warm() -> None:
    """Compile every page now (a page and the one it extends are loaded on first use):
    a server's first answers would otherwise each wait for Jinja2 to load and compile
    the pages they show, tens of milliseconds that set a busy server's slowest answers.
    Once per process, however many inboxes' pages a server makes."""
    env = _templates()
    for name in env.list_templates(extensions=["html"]):
        env.get_template(name)


def page(template: str, context: Mapping[str, Any], status: int = 200,
         headers: Fields = ()) -> Response:
    """A template rendered as an HTML answer, with the security headers."""
    text = _templates().get_template(template).render(**context)
    return Response.html(status, text, (*SECURITY, *headers))


@functools.cache
def _stylesheet() -> bytes:
    from importlib.resources import files

    return files("agentbox").joinpath("static", "agentbox.css").read_bytes()


def stylesheet() -> Response:
    """The one stylesheet; it holds nothing private, so it may be cached for a while."""
    return Response(200, _stylesheet(), "text/css; charset=utf-8",
                    (("Cache-Control", "max-age=3600"), ("X-Content-Type-Options", "nosniff")))


def redirect(location: str, headers: Fields = ()) -> Response:
    """After an action: 303, so the browser GETs the page and a reload repeats nothing."""
    return Response(303, b"", None, (*SECURITY, ("Location", location), *headers))


def when(t: int | None, zone: ZoneInfo) -> str:
    """A time as people read it, in their zone (with the zone's abbreviation)."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M %Z")
