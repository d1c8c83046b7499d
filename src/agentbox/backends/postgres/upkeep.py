"""Looking after PostgreSQL: what the schema takes on disk, and its health.

A backup of one inbox is an SQLite inbox file, written row by row by the
ledger (:mod:`agentbox.ledger.copy`) from one snapshot: the server has no
file of one inbox to copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbox.backends.postgres.schema import SCHEMA_VERSION
from agentbox.rules.health import Check

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader


def disk_bytes(reader: Reader) -> int:
    """What the schema takes on disk, tables and indexes: shared by every inbox in it."""
    row = reader.one("""SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)
                      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = current_schema() AND c.relkind = 'r'""")
    assert row is not None  # an aggregate: always one row
    return int(row[0])


def checks(reader: Reader) -> list[Check]:
    """The database's own checks: integrity, schema version, who else may read the rows."""
    row = reader.one(
        """SELECT current_setting('data_checksums'),
                  (SELECT COALESCE(MAX(version), 0) FROM migrations),
                  (SELECT array_agg(version ORDER BY version) FROM migrations),
                  (SELECT array_agg(DISTINCT table_name::text)
                   FROM information_schema.role_table_grants
                   WHERE grantee = 'PUBLIC' AND table_schema = current_schema())""")
    assert row is not None
    checksums, version, applied, granted = row
    integrity = Check("integrity", True,
                      "the server keeps its pages whole (data checksums "
                      f"{'on' if checksums == 'on' else 'off'}); damage shows as an error")
    applied = list(applied or [])
    if version != SCHEMA_VERSION or applied != list(range(1, version + 1)):
        schema = Check("schema", False, f"version {version} with migrations {applied}; "
                                        f"this agentbox expects {SCHEMA_VERSION}")
    else:
        schema = Check("schema", True, f"version {version}, every migration recorded")
    if granted:
        access = Check("permissions", False, "every role may use these tables: "
                                             f"{', '.join(sorted(granted))}")
    else:
        access = Check("permissions", True, "no table is granted to every role")
    return [integrity, schema, access]
