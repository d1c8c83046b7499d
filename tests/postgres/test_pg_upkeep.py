"""Looking after a PostgreSQL schema: what it takes on disk and its own health checks,
each compared with what the server itself says."""

from __future__ import annotations

import psycopg
import pytest

from agentbox.backends.postgres import upkeep
from agentbox.backends.postgres.schema import SCHEMA_VERSION
from agentbox.backends.postgres.url import parse
from agentbox.ledger.store import Store
from agentbox.rules.health import Check
from support.clock import T0

pytestmark = pytest.mark.postgres_only


def server(url: str, query: str) -> list[tuple[object, ...]]:
    """``query`` on a connection of the test's own, in the schema ``url`` names."""
    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{target.schema}"')
        cursor = conn.execute(query)
        return cursor.fetchall() if cursor.description else []


def checks_of(store: Store) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.detail) for c in store.checks()}


def test_the_bytes_on_disk_are_every_table_of_the_schema_with_its_indexes(
        store: Store, pg_url: str) -> None:
    for n in range(200):
        store.ingest("hook", str(n), '{"text": "%s"}' % ("x" * 200), T0)
    [(expected,)] = server(pg_url, """
        SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind = 'r'""")
    [(events,)] = server(pg_url, "SELECT pg_total_relation_size('events')")
    assert int(expected) > int(events) > 0  # type: ignore[call-overload]
    assert store.vitals().bytes == expected


def test_a_healthy_schema_says_why_each_check_passed(store: Store, pg_url: str) -> None:
    store.ingest("hook", "1", "{}", T0)
    [(checksums,)] = server(pg_url, "SHOW data_checksums")
    found = checks_of(store)
    assert list(found) == ["integrity", "schema", "permissions"]
    assert found["integrity"] == (True, "the server keeps its pages whole (data checksums "
                                        f"{checksums}); damage shows as an error")
    assert found["schema"] == (True, f"version {SCHEMA_VERSION}, every migration recorded")
    assert found["permissions"] == (True, "no table is granted to every role")


def test_tables_granted_to_every_role_fail_the_permissions_check(
        store: Store, pg_url: str) -> None:
    store.ingest("hook", "1", "{}", T0)
    server(pg_url, "GRANT SELECT ON events, outbox TO PUBLIC")
    assert checks_of(store)["permissions"] == (
        False, "every role may use these tables: events, outbox")


def test_a_schema_of_another_version_fails_the_schema_check(store: Store, pg_url: str) -> None:
    store.ingest("hook", "1", "{}", T0)
    applied = list(range(1, SCHEMA_VERSION + 1))
    server(pg_url, f"INSERT INTO migrations VALUES ({SCHEMA_VERSION + 1}, 0)")
    assert checks_of(store)["schema"] == (
        False, f"version {SCHEMA_VERSION + 1} with migrations {[*applied, SCHEMA_VERSION + 1]}; "
               f"this agentbox expects {SCHEMA_VERSION}")
    server(pg_url, f"DELETE FROM migrations WHERE version IN (1, {SCHEMA_VERSION + 1})")
    assert checks_of(store)["schema"] == (
        False, f"version {SCHEMA_VERSION} with migrations {applied[1:]}; "
               f"this agentbox expects {SCHEMA_VERSION}")


class _Settings:
    """A reader answering the checks' one query with a server's settings as given:
    this server's data checksums cannot be turned on for a test."""

    def __init__(self, checksums: str) -> None:
        self.row = (checksums, SCHEMA_VERSION, list(range(1, SCHEMA_VERSION + 1)), None)

    def one(self, sql: str, /, **params: object) -> tuple[object, ...]:
        return self.row


@pytest.mark.parametrize("checksums", ["on", "off"])
def test_the_integrity_check_says_whether_the_server_checksums_its_pages(
        checksums: str) -> None:
    [integrity, *_] = upkeep.checks(_Settings(checksums))  # type: ignore[arg-type]
    assert integrity == Check("integrity", True, "the server keeps its pages whole (data "
                                                 f"checksums {checksums}); damage shows as "
                                                 "an error")
