"""PostgreSQL for tests: the server to use, a fresh schema per test, or one reason to skip.

The server is ``$AGENTBOX_TEST_PG`` (default: trust auth on 127.0.0.1:5432,
database ``test``). When it cannot be reached the PostgreSQL tests are
skipped with one reason, on a laptop without a server; with
``AGENTBOX_REQUIRE_PG=1`` (CI sets it) they fail instead, so CI can never
pass without having run them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SKIPPED = "PostgreSQL tests skipped"  # every skip reason starts so; conftest counts them


@functools.cache
def _reach() -> tuple[str, str | None]:
    """(url, why it cannot be used or None); asked once per test session."""
    url = os.environ.get("AGENTBOX_TEST_PG") or DEFAULT_URL
    try:
        import psycopg
    except ImportError:
        return url, "psycopg is not installed (pip install 'agentbox[postgres]')"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        from agentbox.backends.postgres.db import parse

        first = (str(exc).strip().splitlines() or ["unreachable"])[0]
        return url, f"no PostgreSQL server at {parse(url).location} ({first})"
    return url, None


def server_url() -> str:
    """The test server's URL; skips (or fails, under AGENTBOX_REQUIRE_PG=1) without one."""
    url, why = _reach()
    if why is not None:
        message = f"{why}; set AGENTBOX_TEST_PG to a PostgreSQL URL"
        if os.environ.get("AGENTBOX_REQUIRE_PG") == "1":
            pytest.fail(f"AGENTBOX_REQUIRE_PG=1 but {message}", pytrace=False)
        pytest.skip(f"{SKIPPED}: {message}")
    return url


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A URL naming a new, empty schema on the test server, dropped afterwards."""
    from agentbox.backends.postgres.db import temporary_schema

    with temporary_schema(server_url(), "agentbox_test") as url:
        yield url
