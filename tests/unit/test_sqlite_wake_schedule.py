"""When a watcher of an SQLite inbox looks again after a ring: soon after the ring, then
at pauses a quarter longer each time, up to a bound, until the commit shows or the ring
is given up on; and, without inotify, when the poll looks. Pinned on the schedule
itself, with no clock read (the poll's sleeps move a clock of the test's own)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from agentbox.backends.sqlite import wake
from agentbox.backends.sqlite.wake import (
    FIRST_RECHECK,
    LONGEST_RECHECK,
    RECHECK_GROWTH,
    SAFETY,
    SETTLE,
    Changes,
)
from support.clock import SleepingClock


@pytest.fixture
def changes(tmp_path: Path) -> Changes:
    versions = {"inbox": 7}
    found = Changes(tmp_path, lambda f: "inbox", lambda: ["inbox"], versions.__getitem__)
    found.versions = versions  # type: ignore[attr-defined]
    return found


def rung(changes: Changes, at: float) -> None:
    """What a ring of the inbox's file at ``at`` leaves: a look due at once."""
    changes.suspects["inbox"] = (at, FIRST_RECHECK, at + SETTLE)


def test_looks_after_a_ring_come_a_quarter_later_each_time(changes: Changes) -> None:
    assert (FIRST_RECHECK, RECHECK_GROWTH) == (0.0001, 1.25)
    rung(changes, 100.0)
    now, pauses = 100.0, []
    for _ in range(34):  # to the longest pause, within SETTLE
        assert changes._confirm(now) == set()
        at, _, give_up = changes.suspects["inbox"]
        assert give_up == 100.0 + SETTLE
        pauses.append(at - now)
        now = at
    assert pauses[:3] == pytest.approx([0.0001, 0.000125, 0.00015625])
    assert all(b == pytest.approx(min(a * 1.25, LONGEST_RECHECK))
               for a, b in itertools.pairwise(pauses))
    assert max(pauses) == pytest.approx(LONGEST_RECHECK)


def test_a_look_before_its_time_reads_nothing_and_the_commit_shows_at_the_next(
        changes: Changes) -> None:
    rung(changes, 100.0)
    assert changes._confirm(100.0) == set()
    changes.versions["inbox"] = 8  # type: ignore[attr-defined]
    assert changes._confirm(100.0 + FIRST_RECHECK / 2) == set()  # not yet due
    assert changes._confirm(100.0 + FIRST_RECHECK) == {"inbox"}
    assert "inbox" not in changes.suspects and changes.seen["inbox"] == 8


def test_a_ring_whose_commit_never_shows_is_given_up_on(changes: Changes) -> None:
    rung(changes, 100.0)
    assert changes._confirm(100.0 + SETTLE) == set()
    assert "inbox" not in changes.suspects


def test_the_doorbell_is_inotify_here(changes: Changes) -> None:
    assert changes.notified and isinstance(changes.bell, wake._Inotify)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SleepingClock:
    found = SleepingClock()
    monkeypatch.setattr(wake, "time", found)
    return found


def test_without_inotify_a_look_is_due_at_once_then_every_period(clock: SleepingClock) -> None:
    """A poll says 'anything may have changed' (None) when its look is due, sleeping
    until then; before, it says nothing changed once the caller's timeout is spent."""
    bell = wake._Polling(0.25)  # times a binary fraction can hold exactly
    assert bell.ring(10.0) is None and clock.slept == []  # the first look: at once
    assert bell.ring(10.0) is None and clock.slept == [0.25]  # the next: a period later
    assert bell.ring(0.125) == set() and clock.slept == [0.25, 0.125]  # not due yet
    assert bell.ring(10.0) is None and clock.slept == [0.25, 0.125, 0.125]  # due
    clock.now += 1.0  # a caller busy for longer than a period
    assert bell.ring(0.0) is None and len(clock.slept) == 3  # due: at once, no pause
    assert bell.ring(0.0) == set() and len(clock.slept) == 3  # and then not for a period


class _Bell:
    """A doorbell answering each ring with the next of ``answers`` at once, then, once
    they run out, with nothing after the whole timeout, on the test's clock."""

    def __init__(self, clock: SleepingClock, *answers: set[str] | None) -> None:
        self.clock, self.answers = clock, list(answers)
        self.asked: list[float] = []

    def ring(self, timeout: float) -> set[str] | None:
        self.asked.append(timeout)
        assert len(self.asked) < 100, "rung again and again with no time passing"
        if self.answers:
            return self.answers.pop(0)
        self.clock.now += timeout
        return set()

    def close(self) -> None:
        pass


def watched(tmp_path: Path, clock: SleepingClock, versions: list[int | None],
            *answers: set[str] | None) -> tuple[Changes, _Bell]:
    """One inbox ("inbox", its file "inbox.file") whose data_version reads are
    ``versions`` in turn (the last one for good), rung by ``answers``."""
    reads = iter(versions)
    last: list[int | None] = []

    def version(name: str) -> int | None:
        last[:] = [next(reads, *last)]
        return last[0]

    found = Changes(tmp_path, lambda f: "inbox" if f == "inbox.file" else None,
                    lambda: ["inbox"], version)
    found.bell.close()
    bell = found.bell = _Bell(clock, *answers)  # type: ignore[assignment]
    return found, bell


def test_a_wait_with_no_time_left_rings_once_without_waiting(
        tmp_path: Path, clock: SleepingClock) -> None:
    changes, bell = watched(tmp_path, clock, [7])
    assert changes.wait(0.0) == set()
    assert changes.wait(-5.0) == set()
    assert bell.asked == [0.0, 0.0] and clock.now == 100.0


def test_a_ring_is_looked_at_again_soon_until_its_commit_shows(
        tmp_path: Path, clock: SleepingClock) -> None:
    """The commit rung for is not visible at the first look: the next ring waits only
    until the next look, not for the whole wait or the safety look."""
    changes, bell = watched(tmp_path, clock, [7, 7, 8], {"inbox.file"})
    assert changes.wait(10.0) == {"inbox"}
    assert bell.asked == [SAFETY, pytest.approx(FIRST_RECHECK)]
    assert clock.now == pytest.approx(100.0 + FIRST_RECHECK)


def test_a_ring_that_names_no_file_has_every_inbox_looked_at_at_once(
        tmp_path: Path, clock: SleepingClock) -> None:
    changes, bell = watched(tmp_path, clock, [7, 8], None)
    assert changes.wait(10.0) == {"inbox"}
    assert bell.asked == [SAFETY] and clock.now == 100.0


def test_with_no_ring_every_inbox_is_looked_at_every_safety_period_until_the_deadline(
        tmp_path: Path, clock: SleepingClock) -> None:
    """A lost notification costs a delay, never a missed change; and the wait ends at
    its deadline, to the tick."""
    changes, bell = watched(tmp_path, clock, [7])
    assert (SAFETY, changes.safety_at) == (2.0, 102.0)
    assert changes.wait(10.0) == set()
    assert bell.asked == [2.0] * 5 and clock.now == 110.0
    assert changes.safety_at == 112.0


def test_a_look_not_due_yet_holds_up_no_other(tmp_path: Path) -> None:
    versions = {"a": 1, "b": 1}
    changes = Changes(tmp_path, lambda f: f, lambda: ["a", "b"], versions.__getitem__)
    changes.suspects = {"a": (101.0, FIRST_RECHECK, 102.0), "b": (100.0, FIRST_RECHECK, 101.0)}
    versions["b"] = 2
    assert changes._confirm(100.0) == {"b"}
    assert list(changes.suspects) == ["a"]


def test_an_inbox_this_process_has_not_opened_is_news_at_every_ring(tmp_path: Path) -> None:
    """No connection of its own, so no counter that could tell its writes from another's:
    whatever rang is told."""
    changes = Changes(tmp_path, lambda f: f, lambda: ["inbox"], lambda name: None)
    assert changes.seen == {"inbox": None}
    for now in (100.0, 200.0):
        changes.suspects["inbox"] = (now, FIRST_RECHECK, now + SETTLE)
        assert changes._confirm(now) == {"inbox"}
