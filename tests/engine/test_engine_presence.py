"""Who has an SQLite inbox open: the shared lock every open store holds on a file beside
the inbox, and the exclusive one a restore takes, tried from threads of one process as
from two processes (``flock`` locks belong to the open file, not the process)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from agentbox.backends.sqlite import presence
from agentbox.errors import Busy
from agentbox.ledger.store import Store
from support.clock import SleepingClock
from support.fixtures import Opener

pytestmark = pytest.mark.sqlite_file


def test_the_lock_file_is_hidden_beside_the_inbox_and_private(store: Store) -> None:
    folder, name = os.path.split(store.location)
    assert presence.lock_path(store.location) == os.path.join(folder, f".{name}.lock")
    mode = os.stat(presence.lock_path(store.location)).st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_an_open_store_keeps_a_restore_out_until_it_closes(
        store: Store, open_inbox: Opener) -> None:
    twin = open_inbox()
    with pytest.raises(Busy) as refused:
        presence.take_alone(store.location)
    assert str(refused.value) == (
        f"{store.location}: an agentbox process works on this inbox (a serve, a run or "
        "dispatch --watch, a pool, or a command now); stop it and try again")
    store.close()
    with pytest.raises(Busy):  # the twin still has it open
        presence.take_alone(store.location)
    twin.close()
    alone = presence.take_alone(store.location)
    presence.release(alone)
    presence.release(presence.take_alone(store.location))  # released: to be had again


def test_an_opener_waits_for_a_restore_and_gives_up_after_its_wait(tmp_path: Path) -> None:
    location = str(tmp_path / "alice.sqlite3")
    alone = presence.take_alone(location)
    try:
        began = time.monotonic()
        with pytest.raises(Busy, match="a restore is replacing the inbox; try again"):
            presence.hold(location, 0.3)
        assert 0.3 <= time.monotonic() - began < 5
    finally:
        presence.release(alone)
    held = presence.hold(location, 0.3)
    assert held is not None
    presence.release(held)


def test_an_opener_goes_on_once_the_restore_lets_go(tmp_path: Path) -> None:
    location = str(tmp_path / "alice.sqlite3")
    alone = presence.take_alone(location)
    threading.Timer(0.2, presence.release, (alone,)).start()
    began = time.monotonic()
    held = presence.hold(location, 30)
    waited = time.monotonic() - began
    assert held is not None and 0.15 <= waited < 10
    with pytest.raises(Busy):
        presence.take_alone(location)  # the opener holds it now
    presence.release(held)


def test_no_lock_file_can_be_made_where_the_folder_is_gone(tmp_path: Path) -> None:
    assert presence.hold(str(tmp_path / "gone" / "alice.sqlite3"), 0.1) is None
    presence.release(None)  # nothing held, nothing to let go


def test_a_file_system_without_flock_lets_every_opener_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody can be told apart there: an opener goes on at once, holding the lock file
    open all the same (closed with the store)."""
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    held = presence.hold(str(tmp_path / "alice.sqlite3"), 30)
    assert held is not None
    os.fstat(held)
    presence.release(held)
    with pytest.raises(OSError):
        os.fstat(held)


def test_an_opener_tries_at_its_deadline_and_then_gives_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock of the test's own: a try at once, one after each pause, the last at
    the deadline itself, and no later one."""
    clock = SleepingClock()
    tries = []

    def taken(fd: int, operation: int) -> None:
        tries.append(clock.now)
        raise BlockingIOError(errno.EWOULDBLOCK, "held")

    monkeypatch.setattr(presence, "time", clock)
    monkeypatch.setattr(presence, "PAUSE", 0.125)
    monkeypatch.setattr(fcntl, "flock", taken)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(Busy):
        presence.hold(str(tmp_path / "alice.sqlite3"), 0.25)
    assert tries == [100.0, 100.125, 100.25] and clock.slept == [0.125, 0.125]
    assert set(os.listdir("/proc/self/fd")) <= before  # the lock file closed
