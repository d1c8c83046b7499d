"""A PostgreSQL URL split three ways: what libpq is given, the schema agentbox works in,
and a location safe to print. Nothing here needs the server or the driver."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbox.backends.postgres.url import DEFAULT_SCHEMA, Target, parse, with_schema
from agentbox.errors import UsageError

CASES = [
    ("postgresql://app@db.example:5432/inbox",
     Target("postgresql://app@db.example:5432/inbox", DEFAULT_SCHEMA,
            "postgresql://app@db.example:5432/inbox")),
    ("postgresql://app:s3cret@db/inbox?schema=team_a",
     Target("postgresql://app:s3cret@db/inbox", "team_a",
            "postgresql://app@db/inbox?schema=team_a")),
    ("postgresql://db/inbox?sslmode=require&schema=x&password=hunter2",
     Target("postgresql://db/inbox?sslmode=require&password=hunter2", "x",
            "postgresql://db/inbox?sslmode=require&schema=x")),
    ("postgresql://db/inbox?schema=first&schema=second",
     Target("postgresql://db/inbox", "second", "postgresql://db/inbox?schema=first&schema=second")),
    ("postgresql://u:p@h1,h2/inbox?application_name=my%20app",
     Target("postgresql://u:p@h1,h2/inbox?application_name=my%20app", DEFAULT_SCHEMA,
            "postgresql://u@h1,h2/inbox?application_name=my%20app")),
    # a Unix socket: no host before the path, which must keep its "//" for libpq
    ("postgresql:///inbox?host=/run/postgresql&options=",
     Target("postgresql:///inbox?host=%2Frun%2Fpostgresql&options=", DEFAULT_SCHEMA,
            "postgresql:///inbox?host=%2Frun%2Fpostgresql&options=")),
    # a password written with a bare "@": everything before the last one is hidden, as
    # libpq may read the rest of it as the password
    ("postgresql://app:p@ss@db/inbox",
     Target("postgresql://app:p@ss@db/inbox", DEFAULT_SCHEMA, "postgresql://app@db/inbox")),
    ("postgresql://a%40b:p%3Aw@db/inbox",
     Target("postgresql://a%40b:p%3Aw@db/inbox", DEFAULT_SCHEMA, "postgresql://a%40b@db/inbox")),
]


@pytest.mark.parametrize(("url", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_url_is_split_into_libpqs_part_the_schema_and_what_may_be_shown(
        url: str, expected: Target) -> None:
    assert parse(url) == expected


@pytest.mark.parametrize("schema", ["", "Team", "1st", "a-b", "a b", "x" * 64, "ä", "a;drop"])
def test_a_schema_that_is_no_plain_lower_case_name_is_refused(schema: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse(f"postgresql://db/inbox?schema={schema}")
    assert str(refused.value) == (
        f"schema {schema!r} in the database URL: use 1-63 lower-case letters, digits or "
        "'_', not starting with a digit")


@pytest.mark.parametrize("schema", ["a", "_", "x" * 63, "team_2"])
def test_every_plain_name_up_to_63_characters_is_a_schema(schema: str) -> None:
    assert parse(f"postgresql://db/inbox?schema={schema}").schema == schema


def test_a_url_names_another_schema_with_every_other_parameter_kept() -> None:
    url = "postgresql://u:p@db/inbox?sslmode=require&schema=old&options=-c%20x%3D1"
    moved = with_schema(url, "fresh")
    assert moved == "postgresql://u:p@db/inbox?sslmode=require&options=-c%20x%3D1&schema=fresh"
    assert parse(moved).schema == "fresh"
    assert parse(moved).conninfo == parse(url).conninfo
    assert with_schema("postgresql://db/inbox", "s") == "postgresql://db/inbox?schema=s"
    # a parameter set empty is kept as it was written: libpq reads it as given
    assert with_schema("postgresql://db/inbox?application_name=&schema=a", "b") == (
        "postgresql://db/inbox?application_name=&schema=b")


@given(st.text(min_size=1, max_size=20))
def test_no_password_reaches_the_location(password: str) -> None:
    """Whatever the password, written as a URL carries it (percent-encoded)."""
    encoded = quote(password, safe="")
    target = parse(f"postgresql://app:{encoded}@db/inbox?password={encoded}&schema=s")
    assert target.location == "postgresql://app@db/inbox?schema=s"
    assert target.conninfo == f"postgresql://app:{encoded}@db/inbox?password={encoded}"
