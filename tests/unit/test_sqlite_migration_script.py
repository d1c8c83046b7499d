"""A migration script of the SQLite schema, cut into statements to run one by one inside
the migration's transaction (executescript would COMMIT first): a trigger's body stays
whole, and a script that ends half-way through a statement is refused, quoting it."""

from __future__ import annotations

import pytest

from agentbox.backends.sqlite import db

SCRIPT = """CREATE TABLE a (x INTEGER);

CREATE TRIGGER a_count AFTER INSERT ON a BEGIN
  UPDATE a SET x = x + 1;
  UPDATE a SET x = x - 1;
END;
CREATE INDEX a_x ON a (x);
"""


def test_a_script_is_cut_into_its_statements_triggers_whole() -> None:
    assert [s.strip() for s in db._split(SCRIPT)] == [
        "CREATE TABLE a (x INTEGER);",
        "CREATE TRIGGER a_count AFTER INSERT ON a BEGIN\n  UPDATE a SET x = x + 1;\n"
        "  UPDATE a SET x = x - 1;\nEND;",
        "CREATE INDEX a_x ON a (x);"]


def test_a_script_ending_inside_a_statement_is_refused_quoting_its_start() -> None:
    unfinished = "CREATE TABLE b (y INTEGER, " + "z" * 80
    with pytest.raises(ValueError) as refused:
        list(db._split(SCRIPT + unfinished))
    assert str(refused.value) == f"incomplete statement in migration: {unfinished[:60]!r}"
