"""PostgreSQL for the pg_* benchmark scripts: the server, a fresh schema per side.

Every side gets a schema of its own in the same database, made by agentbox
(the real tables and triggers) and dropped afterwards, and a session with
agentbox's own settings (``synchronous_commit = on``), so subject and
baseline write with the same durability. Without a reachable server a
script reports itself skipped, unless AGENTBOX_REQUIRE_PG=1 (CI), where it
fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server(args: argparse.Namespace) -> str:
    """The server's URL; a script without one ends here, skipped or failed."""
    url = args.pg or DEFAULT_URL
    try:
        import psycopg
    except ImportError:
        _unavailable(args, "psycopg is not installed (the postgres extra: "
                           "pip install '.[postgres]')")
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        from agentbox.backends.postgres.url import parse

        first = (str(exc).strip().splitlines() or ["unreachable"])[0]
        _unavailable(args, f"no PostgreSQL server at {parse(url).location} "
                           f"({first.rsplit(': ', 1)[-1]}); pass --pg URL")
    return url


def _unavailable(args: argparse.Namespace, why: str) -> None:
    if os.environ.get("AGENTBOX_REQUIRE_PG") == "1":
        raise SystemExit(f"AGENTBOX_REQUIRE_PG=1 but {why}")
    if args.json:
        sys.stdout.write(json.dumps({"rows": [], "skipped": why}) + "\n")
    else:
        print(f"skipped: {why}")
    sys.exit(0)


@contextmanager
def schema(url: str, name: str) -> Iterator[str]:
    """The URL of a fresh schema made by agentbox (tables, triggers), dropped afterwards."""
    from agentbox.backends.postgres.db import connect, temporary_schema
    from agentbox.backends.postgres.url import parse

    with temporary_schema(url, f"agentbox_bench_{name}") as fresh:
        connect(parse(fresh)).close()
        yield fresh


def session(url: str, synchronous: str = "FULL") -> Any:
    """A bare connection with agentbox's session settings: autocommit, durable commits
    (``durable=False``: commits that do not wait for the fsync)."""
    from agentbox.backends.postgres.db import session as open_session
    from agentbox.backends.postgres.url import parse

    return open_session(parse(url), synchronous)
