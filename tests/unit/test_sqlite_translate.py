"""SQLite's errors turned into agentbox's: which kind (Busy is worth a retry, exit 75;
DatabaseError is not) and the one line a user reads, word for word, with and without
the inbox's path in front."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.backends.sqlite.db import translate
from agentbox.errors import Busy, DatabaseError

READ_ONLY = "database is read-only; agentbox needs to write to it"
CORRUPT = "file is corrupt or not an agentbox database"

# (the error SQLite raised, the agentbox error it becomes, its message after the path)
CASES: list[tuple[sqlite3.Error, type[Exception], str]] = [
    (sqlite3.OperationalError("database is locked"), Busy,  # SQLITE_BUSY
     "database stayed busy for 30s; try again"),
    (sqlite3.OperationalError("database table is locked"), Busy,  # SQLITE_LOCKED
     "database stayed busy for 30s; try again"),
    # The word "busy" alone is busy too (see _is_busy).
    (sqlite3.OperationalError("database is busy"), Busy,
     "database stayed busy for 30s; try again"),
    (sqlite3.OperationalError("attempt to write a readonly database"), DatabaseError, READ_ONLY),
    (sqlite3.OperationalError("attempt to write a read-only database"), DatabaseError,
     READ_ONLY),
    (sqlite3.DatabaseError("file is not a database"), DatabaseError, CORRUPT),
    (sqlite3.DatabaseError("database disk image is malformed"), DatabaseError, CORRUPT),
    (sqlite3.DatabaseError("index is corrupt"), DatabaseError, CORRUPT),
    (sqlite3.OperationalError("unable to open database file"), DatabaseError,
     "cannot open the database file"),
    (sqlite3.OperationalError("disk I/O error"), DatabaseError, "disk error: disk I/O error"),
    (sqlite3.OperationalError("database or disk is full"), DatabaseError,
     "disk error: database or disk is full"),
    # Anything else is named as SQLite said it, "disk" or "full" in a name included.
    (sqlite3.OperationalError("no such table: events"), DatabaseError,
     "database error: no such table: events"),
    (sqlite3.OperationalError("no such table: disk_usage"), DatabaseError,
     "database error: no such table: disk_usage"),
    (sqlite3.OperationalError("no such column: fullness"), DatabaseError,
     "database error: no such column: fullness"),
    (sqlite3.IntegrityError("UNIQUE constraint failed: events.source, events.source_id"),
     DatabaseError, "database error: UNIQUE constraint failed: events.source, "
                    "events.source_id"),
]
INBOX = "/srv/agentbox/alice.sqlite3"


def case_id(case: tuple[sqlite3.Error, type[Exception], str]) -> str:
    return str(case[0])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_an_error_without_a_path_is_the_bare_message(
        case: tuple[sqlite3.Error, type[Exception], str]) -> None:
    """A transaction's error knows no path: the line starts with the message itself."""
    exc, kind, message = case
    found = translate(exc)
    assert type(found) is kind
    assert str(found) == message


@pytest.mark.parametrize("path", [INBOX, Path(INBOX)], ids=["str", "Path"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_an_error_with_a_path_names_the_inbox_first(
        case: tuple[sqlite3.Error, type[Exception], str], path: str | os.PathLike[str]) -> None:
    exc, kind, message = case
    found = translate(exc, path)
    assert type(found) is kind
    assert str(found) == f"{INBOX}: {message}"


def test_an_empty_path_is_no_path() -> None:
    assert str(translate(sqlite3.OperationalError("disk I/O error"), "")) == (
        "disk error: disk I/O error")


def real_errors(tmp_path: Path) -> list[str]:
    """What SQLite itself says when the inbox is locked, read-only, not a database, or
    cannot be opened: the table above speaks its words, not made-up ones."""
    said: list[str] = []

    def caught(action: Callable[[], object]) -> None:
        try:
            action()
        except sqlite3.Error as exc:
            said.append(str(exc))

    path = tmp_path / "inbox.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    caught(lambda: other.execute("BEGIN IMMEDIATE"))
    holder.execute("ROLLBACK")
    other.execute("PRAGMA query_only = ON")
    caught(lambda: other.execute("INSERT INTO t VALUES (1)"))
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a database at all\n" * 100)
    caught(lambda: sqlite3.connect(garbage).execute("SELECT * FROM sqlite_schema"))
    caught(lambda: sqlite3.connect(tmp_path / "no" / "such" / "folder"))
    caught(lambda: other.execute("SELECT * FROM events"))
    holder.close()
    other.close()
    return said


def test_the_table_speaks_sqlites_own_words(tmp_path: Path) -> None:
    texts = {str(exc) for exc, _, _ in CASES}
    said = real_errors(tmp_path)
    assert len(said) == 5
    assert set(said) <= texts, set(said) - texts
