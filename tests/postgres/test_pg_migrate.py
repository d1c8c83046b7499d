"""Migrating a schema: every missing migration in one transaction, in one message, so a
new schema costs one round trip and one commit, and a failure part way leaves the
schema as it was found (no half-made tables, no version recorded)."""

from __future__ import annotations

import json

import psycopg
import pytest

from agentbox.backends.postgres import db, schema
from agentbox.backends.postgres.url import parse
from agentbox.errors import Busy, DatabaseError
from support.postgres import GAVE_UP, LOCK_TIMEOUT_S, schema_rows

pytestmark = pytest.mark.postgres_only
BROKEN = ("CREATE TABLE extra (x integer)", "INSERT INTO no_such_table VALUES (1)")


def versions(url: str) -> list[int]:
    rows = schema_rows(url)
    assert rows is not None
    return sorted(json.loads(row)["version"] for row in rows["migrations"])


def test_a_new_schema_gets_every_table_in_one_message(pg_url: str, sent: list[str]) -> None:
    db.connect(parse(pg_url)).close()
    made = [m for m in sent if "CREATE TABLE" in m]
    assert len(made) == 1 and made[0].count("INSERT INTO migrations") == schema.SCHEMA_VERSION
    assert versions(pg_url) == list(range(1, schema.SCHEMA_VERSION + 1))


def test_a_schema_up_to_date_is_opened_with_one_look_at_its_version(
        pg_url: str, sent: list[str]) -> None:
    """No transaction and no migration lock for a schema that needs nothing."""
    db.connect(parse(pg_url)).close()
    sent.clear()
    db.connect(parse(pg_url)).close()
    assert [m for m in sent if "migrations" in m] == [
        "SELECT COALESCE(MAX(version), 0) FROM migrations"]
    assert not [m for m in sent if "pg_advisory_xact_lock" in m], sent


def test_a_failing_migration_of_a_new_schema_leaves_no_schema(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db, "MIGRATIONS", (*schema.MIGRATIONS, BROKEN))
    monkeypatch.setattr(db, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    with pytest.raises(DatabaseError):
        db.connect(parse(pg_url))
    assert schema_rows(pg_url) is None  # CREATE SCHEMA went with the rest


def test_a_failing_later_migration_is_rolled_back_whole(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db.connect(parse(pg_url)).close()
    before = schema_rows(pg_url)
    monkeypatch.setattr(db, "MIGRATIONS", (*schema.MIGRATIONS, BROKEN))
    monkeypatch.setattr(db, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1)
    with pytest.raises(DatabaseError):
        db.connect(parse(pg_url))
    assert schema_rows(pg_url) == before

    fixed = ("CREATE TABLE extra (x integer)", "INSERT INTO extra VALUES (1)")
    monkeypatch.setattr(db, "MIGRATIONS", (*schema.MIGRATIONS, fixed))
    for _ in range(2):
        db.connect(parse(pg_url)).close()
    after = schema_rows(pg_url)
    assert after is not None and after["extra"] == ['{"x":1}']  # ran once
    assert versions(pg_url) == list(range(1, schema.SCHEMA_VERSION + 2))


def test_a_migration_waits_for_another_of_the_same_schema_only(pg_url: str) -> None:
    """The schema's migration lock held by another session (a process making the same
    schema): an opener of a new schema waits for it, Busy after its lock timeout, having
    made nothing; the lock of another schema's migration keeps nobody out."""
    target = parse(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))",
                      (db._MIGRATION_LOCK, target.schema))
        with pytest.raises(Busy) as gave_up:
            db.connect(target, lock_timeout=LOCK_TIMEOUT_S)
        assert str(gave_up.value) == f"{pg_url}: {GAVE_UP}"
        assert schema_rows(pg_url) is None
        other.execute("SELECT pg_advisory_unlock_all()")
        other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))",
                      (db._MIGRATION_LOCK, f"{target.schema}_other"))
        db.connect(target, lock_timeout=LOCK_TIMEOUT_S).close()
    assert versions(pg_url) == list(range(1, schema.SCHEMA_VERSION + 1))


def refusal(url: str) -> str:
    """What opening the schema ``url`` names says, having left it as it was."""
    before = schema_rows(url)
    with pytest.raises(DatabaseError) as refused:
        db.connect(parse(url))
    assert schema_rows(url) == before
    return str(refused.value)


@pytest.mark.parametrize("seen", ["before", "under the lock"])
def test_a_schema_made_by_a_newer_agentbox_is_refused_word_for_word(
        pg_url: str, monkeypatch: pytest.MonkeyPatch, seen: str) -> None:
    """Before anything is written to it, in words saying what to do: whether its version
    was read at once, or only under the migration lock (a newer agentbox made the schema
    while this one was about to)."""
    target = parse(pg_url)
    db.connect(target).close()
    newer = schema.SCHEMA_VERSION + 1
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{target.schema}".migrations VALUES ({newer}, 0)')
    if seen == "under the lock":
        monkeypatch.setattr(db, "_version", lambda conn: None)  # no schema yet, at first
    assert refusal(pg_url) == (
        f"{pg_url}: schema {target.schema} was made by a newer agentbox (schema {newer}, "
        f"this one knows up to {schema.SCHEMA_VERSION}); upgrade agentbox to use it")


def test_a_schema_holding_tables_of_its_own_is_not_taken_for_agentboxs(pg_url: str) -> None:
    target = parse(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {target.schema}")
        conn.execute(f"CREATE TABLE {target.schema}.orders (id integer)")
    assert refusal(pg_url) == (
        f"{pg_url}: schema {target.schema} holds tables, but not an agentbox database; "
        "pick another with ?schema=")
