"""How an SQLite writer waits for the file's write lock (take_write_lock): a try at once,
then after pauses from 50 µs doubling to 2 ms, each drawn between half and one and a half
of it, for as long as the busy timeout allows; and how a new file's switch to WAL waits
out another's. Pinned on a clock of the test's own, against a connection whose lock is
taken as often as the test says."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentbox.backends.sqlite import db
from agentbox.errors import DatabaseError
from support.clock import SleepingClock

STATEMENT = "INSERT INTO t VALUES (1) RETURNING 1"


class _Taken:
    """A connection whose statement finds the lock taken ``times`` times (for ever: -1),
    then answers; or fails with ``error`` instead."""

    def __init__(self, clock: SleepingClock, times: int, error: str = "database is locked"):
        self.clock, self.times, self.error = clock, times, error
        self.sent: list[str] = []
        self.tried: list[float] = []

    def execute(self, sql: str, params: Any = ()) -> Any:
        self.sent.append(sql)
        if sql != STATEMENT:
            return self
        self.tried.append(self.clock.now)
        if self.times:
            self.times -= 1
            raise sqlite3.OperationalError(self.error)
        return self

    def fetchall(self) -> list[tuple[int]]:
        return [(1,)]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SleepingClock:
    found = SleepingClock(0.0)
    monkeypatch.setattr(db, "time", found)
    return found


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """Every jitter drawn (its bounds); each draws the middle, 1."""
    bounds: list[tuple[float, float]] = []

    def middle(low: float, high: float) -> float:
        bounds.append((low, high))
        return 1.0

    monkeypatch.setattr(random, "uniform", middle)
    return bounds


def test_a_free_lock_is_taken_at_once_with_the_busy_handler_off_and_then_on_again(
        clock: SleepingClock, drawn: list[tuple[float, float]]) -> None:
    conn = _Taken(clock, 0)
    assert db.take_write_lock(conn, STATEMENT) == [(1,)]  # type: ignore[arg-type]
    assert conn.sent == ["PRAGMA busy_timeout = 0", STATEMENT, "PRAGMA busy_timeout = 30000"]
    assert (clock.slept, drawn) == ([], [])


def test_a_taken_lock_is_tried_again_after_pauses_doubling_from_50_us_to_2_ms(
        clock: SleepingClock, drawn: list[tuple[float, float]]) -> None:
    conn = _Taken(clock, 9)
    assert db.take_write_lock(conn, STATEMENT) == [(1,)]  # type: ignore[arg-type]
    assert clock.slept == pytest.approx([50e-6, 100e-6, 200e-6, 400e-6, 800e-6, 1.6e-3,
                                         2e-3, 2e-3, 2e-3])
    assert drawn == [(0.5, 1.5)] * 9
    assert len(conn.tried) == 10


def test_a_lock_held_past_the_busy_timeout_fails_with_sqlites_error(
        clock: SleepingClock, drawn: list[tuple[float, float]]) -> None:
    conn = _Taken(clock, -1)
    with pytest.raises(sqlite3.OperationalError, match=r"^database is locked$"):
        db.take_write_lock(conn, STATEMENT)  # type: ignore[arg-type]
    assert conn.tried[-2] < db.BUSY_TIMEOUT_S <= conn.tried[-1]  # the last try: past it
    assert conn.sent[-1] == "PRAGMA busy_timeout = 30000"


@pytest.mark.parametrize("times", [0, 3])
def test_any_other_error_is_sqlites_own_at_once(
        clock: SleepingClock, drawn: list[tuple[float, float]], times: int) -> None:
    """Only a lock held is waited for: a statement that fails for another reason fails
    at the try that met it."""
    conn = _Taken(clock, times + 1)
    real = conn.execute

    def failing(sql: str, params: Any = ()) -> Any:
        if sql == STATEMENT and len(conn.tried) == times:
            conn.tried.append(clock.now)
            raise sqlite3.OperationalError("no such table: t")
        return real(sql, params)

    conn.execute = failing  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError, match=r"^no such table: t$"):
        db.take_write_lock(conn, STATEMENT)  # type: ignore[arg-type]
    assert len(conn.tried) == times + 1 and len(clock.slept) == times


def test_the_last_try_comes_at_the_busy_timeout_itself(
        clock: SleepingClock, drawn: list[tuple[float, float]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget that ends just as the eighth pause does: that try is the last."""
    budget, pause = 0.0, 50e-6
    for _ in range(8):
        budget += pause
        pause = min(pause * 2, 2e-3)
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", budget)
    conn = _Taken(clock, -1)
    with pytest.raises(sqlite3.OperationalError):
        db.take_write_lock(conn, STATEMENT)  # type: ignore[arg-type]
    assert len(conn.tried) == 9 and conn.tried[-1] == budget


# -- switching a new file to WAL, which SQLite answers busy at once when two race ----------

class _Converting:
    """A connection whose switch to WAL finds the file busy ``times`` times (for ever: -1),
    then answers ``mode``."""

    def __init__(self, clock: SleepingClock, times: int, mode: str = "wal") -> None:
        self.clock, self.times, self.mode = clock, times, mode
        self.tried: list[float] = []

    def execute(self, sql: str) -> _Converting:
        assert sql == "PRAGMA journal_mode=WAL"
        self.tried.append(self.clock.now)
        if self.times:
            self.times -= 1
            raise sqlite3.OperationalError("database is locked")
        return self

    def fetchone(self) -> tuple[str]:
        return (self.mode,)


def test_a_switch_to_wal_waits_out_another_in_pauses_doubling_from_1_to_50_ms(
        clock: SleepingClock) -> None:
    db._enable_wal(_Converting(clock, 8), Path("inbox.sqlite3"))  # type: ignore[arg-type]
    assert clock.slept == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05,
                                         0.05])


def test_a_switch_to_wal_gives_up_at_the_busy_timeout(clock: SleepingClock) -> None:
    conn = _Converting(clock, -1)
    with pytest.raises(sqlite3.OperationalError, match=r"^database is locked$"):
        db._enable_wal(conn, Path("inbox.sqlite3"))  # type: ignore[arg-type]
    assert conn.tried[-2] < db.BUSY_TIMEOUT_S <= conn.tried[-1]


def test_a_file_that_will_not_take_wal_is_refused_by_name(clock: SleepingClock) -> None:
    with pytest.raises(DatabaseError) as refused:
        db._enable_wal(_Converting(clock, 0, "delete"), Path("inbox.sqlite3"))  # type: ignore[arg-type]
    assert str(refused.value) == "inbox.sqlite3: cannot switch the database to WAL mode"
    db._enable_wal(_Converting(clock, 0, "WAL"), Path("inbox.sqlite3"))  # type: ignore[arg-type]


def test_a_switch_to_wal_tries_last_at_the_busy_timeout_itself(
        clock: SleepingClock, monkeypatch: pytest.MonkeyPatch) -> None:
    budget, pause = 0.0, 0.001
    for _ in range(8):
        budget += pause
        pause = min(pause * 2, 0.05)
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", budget)
    conn = _Converting(clock, -1)
    with pytest.raises(sqlite3.OperationalError):
        db._enable_wal(conn, Path("inbox.sqlite3"))  # type: ignore[arg-type]
    assert len(conn.tried) == 9 and conn.tried[-1] == budget
