"""The SQLite wake-up: inotify rings confirmed by data_version, and the polling fallback."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.backends.sqlite import wake
from agentbox.backends.sqlite.inboxes import SqliteInboxes, user_of
from agentbox.errors import DatabaseError
from support.clock import T0
from support.sqlite import sqlite_store

PATIENCE = 30.0


def _no_inotify(folder: Path) -> None:
    raise OSError("no inotify here")


@pytest.fixture(params=["inotify", "polling"])
def bell(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with inotify, and again as on a system without it."""
    if request.param == "polling":
        monkeypatch.setattr(wake, "_Inotify", _no_inotify)
    return str(request.param)


def later(seconds: float, action: Callable[[], object]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_the_waiter_uses_inotify_where_there_is_some(bell: str, folder: Path) -> None:
    with sqlite_store(folder / "alice.sqlite3") as store:
        waiter = store.waiter()
        assert waiter.changes.notified is (bell == "inotify")  # type: ignore[attr-defined]
        waiter.close()


def test_a_commit_wakes_the_waiter_once_it_is_visible(bell: str, folder: Path) -> None:
    path = folder / "alice.sqlite3"
    with sqlite_store(path) as mine, sqlite_store(path) as theirs:
        waiter = mine.waiter()
        try:
            for n in range(5):
                timer = later(0.1, lambda n=n: theirs.ingest("chat", f"m{n}", "{}", T0))
                assert waiter.wait(PATIENCE)
                timer.join()
                # Woken only once the commit shows: the reader sees the new event.
                assert mine.status().events["pending"] == n + 1
        finally:
            waiter.close()


def test_a_commit_wakes_the_waiter_by_its_ring_not_at_the_safety_look(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inotify names the file written: a commit to the inbox's log is the inbox's own, and
    wakes the waiter soon after, not at the look every SAFETY seconds that would find it
    all the same (put out of reach here)."""
    monkeypatch.setattr(wake, "SAFETY", 3600.0)
    path = folder / "alice.sqlite3"
    with sqlite_store(path) as mine, sqlite_store(path) as theirs:
        waiter = mine.waiter()
        try:
            assert waiter.changes.notified  # type: ignore[attr-defined]
            timer = later(0.1, lambda: theirs.ingest("chat", "m1", "{}", T0))
            assert waiter.wait(10.0)
            timer.join()
        finally:
            waiter.close()


def test_a_waiter_whose_inbox_cannot_be_read_names_it(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The look that confirms a change fails in agentbox's words, naming the inbox."""
    monkeypatch.setattr(wake, "_Inotify", _no_inotify)  # a look at once, at the first poll
    path = folder / "alice.sqlite3"
    store = sqlite_store(path)
    waiter = store.waiter()
    store.close()
    try:
        with pytest.raises(DatabaseError) as failed:
            waiter.wait(PATIENCE)
        assert str(failed.value) == (f"{path}: database error: Cannot operate on a "
                                     "closed database.")
    finally:
        waiter.close()


def test_without_inotify_the_folder_is_polled_less_often_the_more_inboxes_it_holds(
        folder: Path, inboxes: SqliteInboxes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each poll reads every inbox: 2 ms of period per inbox, and never under POLL."""
    monkeypatch.setattr(wake, "_Inotify", _no_inotify)
    periods = {}
    for count in (1, 25, 50):
        monkeypatch.setattr(inboxes, "users", lambda n=count: [f"u{i}" for i in range(n)])
        waiter = inboxes.waiter()
        periods[count] = waiter.changes.bell.period  # type: ignore[union-attr]
        waiter.close()
    assert wake.POLL == 0.05
    assert periods == {1: 0.05, 25: 0.05, 50: pytest.approx(0.1)}


def test_inotify_names_every_file_written_since_the_last_ring(folder: Path) -> None:
    """Names of every length, and more of them than one read of the queue takes (64 KiB):
    a busy folder's every file is told, and a ring with no time left waits for none."""
    bell = wake._Inotify(folder)
    try:
        began = time.monotonic()
        assert bell.ring(0.0) == set()
        assert time.monotonic() - began < 0.9  # a wait of a second would be one for nothing
        names = {f"f{n}{'x' * (n % 37)}{'X' if n % 2 else ''}" for n in range(3000)}
        for name in names:
            (folder / name).write_bytes(b"")
        assert bell.ring(0.0) == names
        assert bell.ring(0.0) == set()
    finally:
        bell.close()


def test_inotify_that_lost_count_of_the_writes_says_so(folder: Path) -> None:
    """More writes than the kernel queues for a ring: the names are lost, and the ring
    says so (None: look at everything), once."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"the kernel queues {limit} events: too many files to write")
    bell = wake._Inotify(folder)
    try:
        for n in range(limit + 1):
            (folder / f"f{n}").write_bytes(b"")
        assert bell.ring(0.0) is None
        assert bell.ring(0.0) == set()
    finally:
        bell.close()


def test_a_folder_that_cannot_be_watched_is_polled_and_nothing_is_left_open(
        tmp_path: Path) -> None:
    def descriptors() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    before = descriptors()
    bell = wake.doorbell(tmp_path / "gone", 0.25)
    assert isinstance(bell, wake._Polling) and bell.period == 0.25
    assert descriptors() <= before


def test_closing_a_doorbell_twice_closes_no_other_file(folder: Path) -> None:
    """A number closed is given to the next file opened: a second close must not close
    that file, nor any other."""
    bell = wake._Inotify(folder)
    bell.close()
    kept = os.dup(1)  # standard output, put back should the second close take it
    reader, writer = os.pipe()  # takes the number the doorbell had
    try:
        bell.close()
        os.fstat(reader)
        os.fstat(1)
    finally:
        os.dup2(kept, 1)
        for fd in (kept, reader, writer):
            with contextlib.suppress(OSError):
                os.close(fd)


def test_a_doorbell_given_descriptor_0_closes_it(folder: Path) -> None:
    """A watcher started with its standard input closed gets number 0 for its doorbell,
    which is a file like any other when the doorbell closes."""
    stdin = os.dup(0)
    try:
        os.close(0)
        bell = wake._Inotify(folder)
        assert bell.fd == 0
        bell.close()
        with pytest.raises(OSError):
            os.fstat(0)
    finally:
        os.dup2(stdin, 0)
        os.close(stdin)


def test_writes_to_other_files_in_the_folder_do_not_wake_the_waiter(
        bell: str, folder: Path) -> None:
    with sqlite_store(folder / "alice.sqlite3") as alice, \
            sqlite_store(folder / "bob.sqlite3") as bob:
        waiter = alice.waiter()
        try:
            bob.ingest("chat", "m1", "{}", T0)
            (folder / "notes.txt").write_text("hello")
            assert not waiter.wait(0.5)
        finally:
            waiter.close()


def test_the_folder_waiter_names_the_inboxes_that_changed(
        bell: str, folder: Path, inboxes: SqliteInboxes) -> None:
    with sqlite_store(folder / "alice.sqlite3") as alice:
        alice.ingest("chat", "m0", "{}", T0)
    assert inboxes.users() == ["alice"]
    assert inboxes.next_work(T0, ["alice"]) == {"alice": 0}
    waiter = inboxes.waiter()
    try:
        with sqlite_store(folder / "alice.sqlite3") as alice:
            later(0.1, lambda: alice.ingest("chat", "m1", "{}", T0)).join()
            assert waiter.wait(PATIENCE) == {"alice"}
        # A new inbox appears: named too, before anyone opened it here.
        later(0.1, lambda: sqlite_store(folder / "carol.sqlite3").close()).join()
        assert "carol" in waiter.wait(PATIENCE)
        assert inboxes.users() == ["alice", "carol"]
    finally:
        waiter.close()


def test_the_folder_waiter_ignores_this_process_own_writes(
        bell: str, folder: Path, inboxes: SqliteInboxes) -> None:
    sqlite_store(folder / "alice.sqlite3").close()
    store = inboxes.store("alice")
    waiter = inboxes.waiter()
    try:
        store.ingest("chat", "m1", "{}", T0)
        began = time.monotonic()
        assert waiter.wait(0.5) == set()
        assert time.monotonic() - began >= 0.45
    finally:
        waiter.close()


def test_files_that_are_not_inboxes_are_left_alone(
        folder: Path, inboxes: SqliteInboxes) -> None:
    (folder / "..hidden.sqlite3").write_bytes(b"")
    (folder / "notes.sqlite3.bak").write_bytes(b"")
    (folder / "junk.sqlite3").write_text("not a database")
    sqlite_store(folder / "alice.sqlite3").close()
    assert user_of("alice.sqlite3-wal") == user_of("alice.sqlite3") == "alice"
    assert user_of("..hidden.sqlite3") is None
    assert user_of("alice.sqlite3-backup") is None  # not a side file SQLite keeps
    assert inboxes.users() == ["alice", "junk"]
    assert inboxes.next_work(T0, inboxes.users()) == {}
    failed = inboxes.failures()
    assert list(failed) == ["junk"] and "not an agentbox database" in failed["junk"]
    assert inboxes.failures() == {}


def test_a_user_whose_name_holds_the_inbox_suffix_is_listed_and_woken_by_its_own_name(
        folder: Path, inboxes: SqliteInboxes) -> None:
    """``a.sqlite3-b`` is a user name: its file and that file's log are its own, not
    user ``a``'s."""
    name = "a.sqlite3-b"
    sqlite_store(folder / f"{name}.sqlite3").close()
    assert [user_of(f"{name}.sqlite3{side}") for side in ("", "-wal", "-shm", "-journal")] == [
        name] * 4
    assert inboxes.users() == [name]
