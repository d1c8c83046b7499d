"""Looking after one inbox in PostgreSQL: its vitals, its health, a copy of it.

A backup is an SQLite inbox file: one inbox's rows, read in one snapshot while
writers carry on, written under the same ids, keys and instance id, so
``--db COPY`` opens it on any machine, with or without PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from psycopg import Connection

from agentbox.backends.postgres.db import Box
from agentbox.backends.postgres.schema import SCHEMA_VERSION
from agentbox.rules.health import Check


def readings(box: Box) -> tuple[int | None, int | None, int | None, int | None]:
    """(oldest pending arrival, last run, last prune, last activity), in one read.

    The newest arrival and the newest recorded transition are each the end of
    their table's (inbox_id, id) key, so neither is a scan.
    """
    row = box.read(
        """SELECT (SELECT created_at FROM events WHERE inbox_id = %(box)s
                   AND status = 'pending' ORDER BY id LIMIT 1),
                  i.last_run, i.last_prune,
                  (SELECT created_at FROM events WHERE inbox_id = %(box)s
                   ORDER BY id DESC LIMIT 1),
                  (SELECT at FROM history WHERE inbox_id = %(box)s ORDER BY id DESC LIMIT 1)
           FROM (SELECT %(box)s AS id) me LEFT JOIN inboxes i ON i.id = me.id""",
        {"box": box.id}).fetchone()
    assert row is not None
    oldest, last_run, last_prune, *moments = row
    known = [m for m in (last_run, *moments) if m is not None]
    return oldest, last_run, last_prune, max(known) if known else None


def disk_bytes(box: Box) -> int:
    """What the schema takes on disk, tables and indexes: shared by every inbox in it."""
    row = box.read("""SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)
                      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = current_schema() AND c.relkind = 'r'""").fetchone()
    return int(row[0]) if row else 0


def checks(box: Box) -> list[Check]:
    """The database's own checks: integrity, schema version, who else may read the rows."""
    row = box.read(
        """SELECT current_setting('data_checksums'),
                  (SELECT COALESCE(MAX(version), 0) FROM migrations),
                  (SELECT array_agg(version ORDER BY version) FROM migrations),
                  (SELECT array_agg(DISTINCT table_name::text)
                   FROM information_schema.role_table_grants
                   WHERE grantee = 'PUBLIC' AND table_schema = current_schema())""").fetchone()
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


# Each table of the copy, with the columns read from PostgreSQL in that order,
# oldest row first (history in its order, so each story reads the same).
_COPIED = {
    "events": ("id, source, source_id, payload, status, attempts, claim_gen, available_at, "
               "error, created_at, updated_at", "id"),
    "history": ("at, subject, subject_id, action, generation, detail", "id"),
    "timers": ("name, due, every, payload, catch_up, event_source, event_id, done::int, "
               "created_at, cron, tz", "name"),
    "approvals": ("id, action, requested_at, expires_at", "id"),
    "outbox": ("id, body, urgent::int, state, dispatch_key, generation, created_at, sent_at, "
               "error", "id"),
    "dispatches": ("seq, key, mode, state, body, urgent::int, claimed_at, deadline, tries, "
                   "max_tries, finished_at, error", "seq"),
    "pruned_keys": ("source, source_id, digest, event_id, until", "source, source_id"),
}


def backup(conn: Connection[Any], box_id: int, dest: str, replace: bool) -> int:
    """Write the inbox to ``dest`` as an SQLite inbox file (see the module); its size."""
    from agentbox.backends.sqlite.upkeep import write_copy

    def fill(temp: Path) -> None:
        # One snapshot for every table, so the copy is what one moment saw.
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            _copy(conn, box_id, temp)

    return write_copy(dest, replace, fill)


def _copy(conn: Connection[Any], box_id: int, path: Path) -> None:
    from agentbox.backends.sqlite import db as sqlite_db

    row = conn.execute(
        """SELECT instance, last_run, last_prune, lease_holder, lease_generation, lease_until,
                  lease_released FROM inboxes RIGHT JOIN (SELECT %s AS id) me USING (id)""",
        (box_id,)).fetchone()
    assert row is not None  # one row, of NULLs when the inbox was never made
    instance, last_run, last_prune, *lease = row
    copy = sqlite_db.connect(path, synchronous="OFF", make_folders=False)
    try:
        with sqlite_db.write(copy):
            if instance is not None:
                sqlite_db.set_meta(copy, "instance", instance)
            for key, value in ((sqlite_db.LAST_RUN, last_run),
                               (sqlite_db.LAST_PRUNE, last_prune)):
                if value is not None:
                    sqlite_db.set_meta(copy, key, value)
            if lease[0] is not None:
                copy.execute("""INSERT INTO lease (one, holder, generation, until, released)
                                VALUES (1, ?, ?, ?, ?)""", (*lease[:3], int(lease[3])))
            for table, (columns, order) in _COPIED.items():
                _copy_table(conn, copy, box_id, table, columns, order)
            # New events are counted by the code that stores them, not by a trigger.
            copy.execute("""UPDATE state_counts SET n = (SELECT COUNT(*) FROM events
                                                         WHERE status = state_counts.state)
                            WHERE tbl = 'events'""")
        copy.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        copy.close()


def _copy_table(conn: Connection[Any], copy: sqlite3.Connection, box_id: int, table: str,
                columns: str, order: str) -> None:
    names = ", ".join(c.split("::")[0] for c in columns.split(", "))
    marks = ", ".join("?" * len(columns.split(", ")))
    cursor = conn.cursor(name=f"copy_{table}")  # server-side: a big inbox streams
    cursor.execute(f"SELECT {columns} FROM {table} WHERE inbox_id = %s ORDER BY {order}",
                   (box_id,))
    while rows := cursor.fetchmany(1000):
        copy.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})",
                         [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                          for row in rows])
    cursor.close()
