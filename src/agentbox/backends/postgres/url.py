"""A ``postgresql://`` URL: what libpq gets, the schema, and a location safe to show.

Free of psycopg, so that a command can name a PostgreSQL inbox (an empty
view of one, say) without loading the driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit

from agentbox.errors import UsageError

DEFAULT_SCHEMA = "agentbox"
SCHEMA_PARAM = "schema"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class Target:
    """A parsed ``postgresql://`` URL."""

    conninfo: str  # for libpq: the URL without agentbox's own parameter
    schema: str
    location: str  # the URL without its password, for people and `status`


def _join(parts: SplitResult, netloc: str, query: list[tuple[str, str]]) -> str:
    """The URL again, with ``netloc`` and ``query`` instead of its own. Not
    ``urlunsplit``: it drops the ``//`` of an empty host (``postgresql:///inbox?host=
    /run/postgresql``, libpq's form for a Unix socket), which libpq then refuses."""
    shown = urlencode(query, quote_via=quote)
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{shown}" if shown else "")


def parse(url: str) -> Target:
    """Split a URL into what libpq gets, the schema, and a location safe to show.

    ``?schema=NAME`` (lower-case letters, digits and ``_``) picks the schema;
    every other parameter is libpq's. A password in the URL, or in a
    ``password`` parameter, never reaches the location.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == SCHEMA_PARAM]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise UsageError(f"schema {schema!r} in the database URL: use 1-63 lower-case "
                         "letters, digits or '_', not starting with a digit")
    kept = [(k, v) for k, v in query if k != SCHEMA_PARAM]
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    location = _join(parts, f"{user}{at}{hosts}", [(k, v) for k, v in query if k != "password"])
    return Target(_join(parts, parts.netloc, kept), schema, location)


def with_schema(url: str, schema: str) -> str:
    """``url`` naming ``schema`` instead of whatever schema it named."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k != SCHEMA_PARAM] + [(SCHEMA_PARAM, schema)]
    return _join(parts, parts.netloc, query)
