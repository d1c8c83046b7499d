"""A folder of SQLite inbox files served by one process: the open files it may hold,
an inbox that cannot be read left out without holding up the others, and let go."""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import pytest

from agentbox.backends.sqlite import presence
from agentbox.backends.sqlite.inboxes import SqliteInboxes
from agentbox.errors import DatabaseError
from support.clock import T0
from support.sqlite import sqlite_store
from support.store import break_inbox

pytestmark = pytest.mark.sqlite_file


def limits(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int,
           refusal: Exception | None = None) -> list[tuple[int, tuple[int, int]]]:
    """The process's limit on open files as (soft, hard), and every change asked of it
    (refused with ``refusal``, if given); the test process's own is left alone."""
    asked: list[tuple[int, tuple[int, int]]] = []

    def setrlimit(which: int, values: tuple[int, int]) -> None:
        asked.append((which, values))
        if refusal is not None:
            raise refusal

    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return asked


def test_every_inbox_stays_open_so_the_soft_limit_on_open_files_is_raised_to_the_hard(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = limits(monkeypatch, 1024, 524288)
    SqliteInboxes(folder).close()
    assert asked == [(resource.RLIMIT_NOFILE, (524288, 524288))]


def test_a_soft_limit_at_the_hard_one_already_is_left_alone(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = limits(monkeypatch, 4096, 4096)
    SqliteInboxes(folder).close()
    assert asked == []


@pytest.mark.parametrize("refusal", [ValueError("not allowed to raise maximum limit"),
                                     PermissionError(1, "Operation not permitted")])
def test_a_limit_the_system_will_not_raise_serves_the_inboxes_all_the_same(
        folder: Path, monkeypatch: pytest.MonkeyPatch, refusal: Exception) -> None:
    asked = limits(monkeypatch, 1024, 524288, refusal)
    sqlite_store(folder / "alice.sqlite3").close()
    inboxes = SqliteInboxes(folder)
    try:
        assert len(asked) == 1
        assert inboxes.users() == ["alice"]
    finally:
        inboxes.close()


def test_an_inbox_whose_folder_goes_while_it_is_opened_is_not_made_again(
        folder: Path, inboxes: SqliteInboxes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that vanishes between the look for the file and its opening is an error:
    a pool serves the inboxes there are, and never makes a folder or an inbox."""
    sqlite_store(folder / "alice.sqlite3").close()
    found = Path.is_file

    def then_gone(path: Path) -> bool:
        there = found(path)
        shutil.rmtree(folder, ignore_errors=True)
        return there

    monkeypatch.setattr(Path, "is_file", then_gone)
    with pytest.raises(DatabaseError) as refused:
        inboxes.store("alice")
    assert str(refused.value) == (f"{folder / 'alice.sqlite3'}: folder {folder} "
                                  "does not exist")
    assert not folder.exists()


def test_an_inbox_that_cannot_be_read_keeps_no_other_from_being_served(
        folder: Path, inboxes: SqliteInboxes) -> None:
    for user in ("alice", "bob"):
        with sqlite_store(folder / f"{user}.sqlite3") as store:
            store.ingest("chat", "m1", "{}", T0)
    break_inbox(str(folder), "alice")
    assert inboxes.next_work(T0, ["alice", "bob"]) == {"bob": 0}
    assert inboxes.failures() == {
        "alice": f"{folder / 'alice.sqlite3'}: not an agentbox database (not an SQLite file)"}


def test_an_inbox_that_fails_while_served_is_let_go(
        folder: Path, inboxes: SqliteInboxes) -> None:
    """Its store is closed, letting go of the file and of the inbox's presence: a restore
    may then replace it while the pool goes on, and the next look opens it afresh."""
    path = folder / "alice.sqlite3"
    sqlite_store(path).close()
    served = inboxes.store("alice")
    assert inboxes.next_work(T0, ["alice"]) == {}
    junk = folder / "junk"
    junk.write_bytes(b"not an inbox\n" * 512)
    os.replace(junk, path)  # a file copied over it, as damage or a hand would
    assert inboxes.next_work(T0, ["alice"]) == {}
    assert list(inboxes.failures()) == ["alice"]
    presence.release(presence.take_alone(str(path)))  # nobody holds it now
    with pytest.raises(DatabaseError):
        served.status()  # closed
    for side in ("-wal", "-shm"):
        Path(f"{path}{side}").unlink(missing_ok=True)
    path.unlink()
    sqlite_store(path).close()
    assert inboxes.store("alice") is not served
    assert inboxes.next_work(T0, ["alice"]) == {}
    assert inboxes.failures() == {}
