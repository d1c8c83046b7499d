"""PostgreSQL for tests: the server to use, a fresh schema per test, or one reason to skip.

The server is ``$AGENTBOX_TEST_PG`` (default: trust auth on 127.0.0.1:5432,
database ``test``). When it cannot be reached the PostgreSQL tests are
skipped with one reason, on a laptop without a server; with
``AGENTBOX_REQUIRE_PG=1`` (CI sets it) they fail instead, so CI can never
pass without having run them.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import psycopg

    from agentbox.ledger.store import Store

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SKIPPED = "PostgreSQL tests skipped"  # every skip reason starts so
SKIPPED_AT = "tests/support/postgres.py"  # where the summary shows them, folded into one line
LOCK_TIMEOUT_S = 0.1  # a blocked statement gives up at once, not after the default 30 s
GAVE_UP = "database stayed busy (canceling statement due to lock timeout); try again"


def configured_url() -> str:
    """The test server's URL as configured, whether or not a server answers there."""
    return os.environ.get("AGENTBOX_TEST_PG") or DEFAULT_URL


@functools.cache
def _reach() -> tuple[str, str | None]:
    """(url, why it cannot be used or None); asked once per test session."""
    url = configured_url()
    try:
        import psycopg
    except ImportError:
        return url, "psycopg is not installed (the postgres extra: pip install '.[postgres]')"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        from agentbox.backends.postgres.url import parse

        first = (str(exc).strip().splitlines() or ["unreachable"])[0]
        return url, f"no PostgreSQL server at {parse(url).location} ({first.rsplit(': ', 1)[-1]})"
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


# Counts the schemas this process drops; the catalogs are vacuumed every VACUUM_EVERY.
_drops = itertools.count(1)
VACUUM_EVERY = 25
# The system catalogs every test's schema adds rows to and removes them from.
CATALOGS = ("pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_index", "pg_constraint",
            "pg_trigger", "pg_attrdef", "pg_namespace", "pg_sequence", "pg_proc")


# How long a test's schema waits to be dropped for a session that still holds its locks.
DROP_PATIENCE = "10s"
LEFT_OPEN = "a session still held locks in the test's schema after the test: {}"


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A URL naming a new, empty schema on the test server, dropped afterwards.

    A session left inside a transaction (a store not closed, a rollback missed) would
    keep the drop waiting for ever: it is ended after DROP_PATIENCE, the schema dropped,
    and the test fails, naming what that session last ran.
    """
    import secrets

    import psycopg

    from agentbox.backends.postgres.url import with_schema

    url = with_schema(server_url(), f"agentbox_test_{secrets.token_hex(6)}")
    try:
        yield url
    finally:
        left_open = _drop(url)
    if next(_drops) % VACUUM_EVERY == 0:
        with contextlib.suppress(psycopg.Error):  # not ours to vacuum: its autovacuum's
            vacuum_catalogs()
    if left_open:
        pytest.fail(LEFT_OPEN.format(left_open), pytrace=False)


def _drop(url: str) -> list[str]:
    """Drop the schema ``url`` names; the last statements of the sessions that held it
    up and were ended for it (none, as a rule)."""
    import psycopg

    from agentbox.backends.postgres.url import parse

    target = parse(url)
    drop = f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE'
    with psycopg.connect(configured_url(), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"SET lock_timeout = '{DROP_PATIENCE}'")
        try:
            conn.execute(drop)
            return []
        except psycopg.errors.LockNotAvailable:
            ended = [str(query) for _, query in conn.execute(
                """SELECT pg_terminate_backend(a.pid), a.query FROM pg_stat_activity a
                   WHERE a.pid IN (SELECT l.pid FROM pg_locks l
                                   JOIN pg_class c ON c.oid = l.relation
                                   JOIN pg_namespace n ON n.oid = c.relnamespace
                                   WHERE n.nspname = %s) AND a.pid <> pg_backend_pid()""",
                (target.schema,)).fetchall()]
            conn.execute("SET lock_timeout = 0")
            conn.execute(drop)
            return ended or ["(none found)"]


def vacuum_catalogs(full: bool = False) -> None:
    """Make the catalog rows of dropped schemas reusable (``full``: give their space
    back too, locking each catalog while it is rewritten: CI does so once, before the
    tests); raises psycopg.Error.

    Every test makes a schema and drops it. On a server without autovacuum (CI's) their
    dead rows swell the catalogs and every catalog read scans them: each new schema cost
    twice as much after one run of the suite, and a mutation run, which makes tens of
    thousands, grew pg_attribute to 1 GB and checked mutants 30 times slower.

    Without truncation: giving a catalog's empty tail back to the system takes a lock
    that stops every catalog read, so test processes vacuuming at once stalled each
    other's schemas. A catalog another process is vacuuming is skipped, not waited for.
    """
    import psycopg

    with psycopg.connect(configured_url(), autocommit=True, connect_timeout=5) as conn:
        how = "FULL" if full else "(SKIP_LOCKED, TRUNCATE false)"
        conn.execute(f"VACUUM {how} {', '.join(CATALOGS)}")


def dump(store: Store) -> dict[str, object]:
    """Every row of every table that belongs to the store's inbox (the schema's
    migrations included), in one query: two equal dumps mean nothing changed."""
    row = store.engine.conn.execute(_dump_query(store), {"box": store.inbox_id}).fetchone()
    assert row is not None
    return dict(row[0])


def _dump_query(store: Store) -> str:
    """One statement reading every table of the schema, each as a sorted JSON list."""
    tables = store.engine.conn.execute(
        """SELECT c.relname, bool_or(a.attname = 'inbox_id') FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
           WHERE n.nspname = current_schema() AND c.relkind = 'r'
           GROUP BY c.relname ORDER BY c.relname""").fetchall()
    parts = []
    for table, keyed in tables:
        where = ("WHERE inbox_id = %(box)s" if keyed
                 else "WHERE id = %(box)s" if table == "inboxes" else "")
        parts.append(f"""'{table}', (SELECT COALESCE(json_agg(row_to_json(t)::text
                                      ORDER BY row_to_json(t)::text), '[]')
                                      FROM "{table}" t {where})""")
    return f"SELECT json_build_object({', '.join(parts)})"


def real_counts(store: Store, table: str, column: str,
                states: Sequence[str]) -> dict[str, int]:
    """Counts by state from a real GROUP BY over the inbox's rows, zero included."""
    found = dict(store.engine.conn.execute(
        f"SELECT {column}, COUNT(*) FROM {table} WHERE inbox_id = %s GROUP BY {column}",
        (store.inbox_id,)).fetchall())
    assert set(found) <= set(states), found
    return {s: int(found.get(s, 0)) for s in states}


def schema_rows(url: str) -> dict[str, object] | None:
    """Every row of every table of the schema ``url`` names, or None when no schema of
    that name exists: what "nothing was made" means on PostgreSQL."""
    import psycopg

    from agentbox.backends.postgres.url import parse

    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY c.relname""",
            (target.schema,)).fetchall()]
        if not tables and conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                                       (target.schema,)).fetchone() is None:
            return None
        return {table: sorted(str(r[0]) for r in conn.execute(
                    f'SELECT row_to_json(t)::text FROM "{target.schema}"."{table}" t'))
                for table in tables}


@contextmanager
def own_session(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session of the test's own in the schema ``url`` names, in one transaction
    committed when the block ends."""
    import psycopg

    from agentbox.backends.postgres.url import parse

    target = parse(url)
    with psycopg.connect(target.conninfo) as conn:
        conn.execute(f'SET search_path = "{target.schema}"')
        yield conn


@contextmanager
def table_locked(url: str, table: str) -> Iterator[None]:
    """``table`` held by another session, as a migration or VACUUM FULL holds it:
    nobody else reads or writes it until the block ends."""
    with own_session(url) as conn:
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield


def statements(message: str) -> list[str]:
    """The statements of one message a transaction sent (it joins them with ``;\\n``)."""
    return message.split(";\n")


def statement_name(statement: str) -> str:
    """The prepared statement a ``PREPARE`` makes or an ``EXECUTE`` runs."""
    return statement.split("(")[0].split()[1]
