"""Group commit: a server's threads' writes share transactions on SQLite, each answered
its own result only once its group committed, one failing write undone alone, and a
write that gets no turn within the busy bound is Busy with nothing written."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import agentbox.groupcommit as groupcommit
from agentbox.errors import BadInput, Busy
from agentbox.groupcommit import GroupCommit
from agentbox.ledger.store import Store
from agentbox.rules.records import IngestResult
from support.clock import T0
from support.fixtures import Opener

WRITERS = 20


def _when_queued(commit: GroupCommit, n: int) -> None:
    """Wait until ``n`` writes queue behind the group being written."""
    deadline = time.monotonic() + 30
    while len(commit._queue) < n:
        assert time.monotonic() < deadline, "the writers never queued"
        time.sleep(0.005)


def test_writes_of_many_threads_commit_in_groups_each_answered_its_own(
        open_inbox: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    groups: list[int] = []
    real = groupcommit._commit

    def counted(store: Store, group: Any, writes: list[Any]) -> None:
        groups.append(len(writes))
        real(store, group, writes)

    monkeypatch.setattr(groupcommit, "_commit", counted)
    commit = GroupCommit(30)
    results: dict[int, IngestResult | Exception] = {}
    grouped = open_inbox().group() is not None  # SQLite; PostgreSQL groups by itself

    def first(store: Store) -> IngestResult:
        if grouped:
            _when_queued(commit, WRITERS - 1)  # the others queue while this group is open
        return store.ingest("chat", "k0", "{}", T0)

    def job(k: int) -> Callable[[Store], IngestResult]:
        if k == 0:
            return first
        if k == 7:  # a write refused inside its own savepoint: it alone fails
            return lambda s: s.ingest("timer", "x", "{}", T0)
        key = "k1" if k in (1, 2) else f"k{k}"  # 1 and 2 are one delivery, twice
        return lambda s: s.ingest("chat", key, "{}", T0)

    def writer(k: int) -> None:
        store = open_inbox()
        try:
            results[k] = commit.run(store, job(k))
        except Exception as exc:
            results[k] = exc

    threads = [threading.Thread(target=writer, args=(0,))]
    threads[0].start()
    if grouped:
        while not commit._leading:
            time.sleep(0.001)
    threads += [threading.Thread(target=writer, args=(k,)) for k in range(1, WRITERS)]
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert isinstance(results.pop(7), BadInput)
    outcomes = sorted(r.outcome for r in results.values())  # type: ignore[union-attr]
    assert outcomes == ["duplicate"] + ["stored"] * (WRITERS - 2)
    ids = {r.id for r in results.values()}  # type: ignore[union-attr]
    assert len(ids) == WRITERS - 2  # the duplicate named the stored one's id
    assert open_inbox().status().events["pending"] == WRITERS - 2
    assert groups == ([1, WRITERS - 1] if grouped else [])


@pytest.mark.sqlite_file  # only SQLite's engine groups writes (PostgreSQL's group is None)
def test_a_group_commits_once_and_a_write_that_fails_inside_it_is_undone_alone(
        open_inbox: Opener) -> None:
    store, other = open_inbox(), open_inbox()
    group = store.group()
    assert group is not None
    with group:
        assert store.ingest("chat", "a", "{}", T0).outcome == "stored"
        with pytest.raises(RuntimeError), store._write() as tx:
            tx.run("DELETE FROM events WHERE inbox_id = :box")
            raise RuntimeError("the write fails after its first statement")
        assert store.ingest("chat", "b", "{}", T0).outcome == "stored"
        assert other.status().events["pending"] == 0  # nothing committed yet
    assert other.status().events["pending"] == 2  # "a" kept: the delete was undone


@pytest.mark.sqlite_file
def test_a_write_without_a_turn_within_the_bound_is_busy(open_inbox: Opener) -> None:
    commit = GroupCommit(0.2)
    held, release = threading.Event(), threading.Event()

    def slow(store: Store) -> None:
        held.set()
        release.wait(30)

    leader = threading.Thread(target=lambda: commit.run(open_inbox(), slow))
    leader.start()
    held.wait(30)
    started = time.monotonic()
    with pytest.raises(Busy):
        commit.run(open_inbox(), lambda s: s.ingest("chat", "late", "{}", T0))
    assert time.monotonic() - started >= 0.2
    release.set()
    leader.join(30)
    assert open_inbox().find("chat", "late") is None
    assert commit.run(open_inbox(), lambda s: s.ingest("chat", "late", "{}", T0)).outcome \
        == "stored"  # free again once the group is done
