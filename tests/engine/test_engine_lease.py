"""Rule 2: one worker per inbox. A single-row lease whose generation fences every write."""

from __future__ import annotations

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.records import Lease
from support.clock import T0, TTL
from support.sqlite import sqlite_store
from support.store import MakeStepWorker, every_row


def test_the_first_taker_of_a_fresh_inbox_gets_generation_one(store: Store) -> None:
    assert store.lease() is None
    assert store.acquire("A", T0, TTL) == 1
    assert store.lease() == Lease("A", 1, T0 + TTL)


def test_renewing_keeps_the_generation_and_extends_the_lease(store: Store) -> None:
    assert store.acquire("A", T0, TTL) == 1
    assert store.acquire("A", T0 + 100, TTL) == 1
    assert store.lease() == Lease("A", 1, T0 + 100 + TTL)
    assert store.renew("A", 1, T0 + 200, TTL)
    assert store.lease() == Lease("A", 1, T0 + 200 + TTL)
    assert store.acquire("A", T0 + 200 + TTL, TTL) == 1  # the last second still counts


def test_another_holder_is_refused_while_the_lease_runs(store: Store) -> None:
    store.acquire("A", T0, TTL)
    before = every_row(store)
    assert store.acquire("B", T0, TTL) is None
    assert store.acquire("B", T0 + TTL, TTL) is None
    assert every_row(store) == before


def test_a_takeover_of_an_expired_lease_bumps_the_generation(store: Store) -> None:
    store.acquire("A", T0, TTL)
    assert store.acquire("B", T0 + TTL + 1, TTL) == 2
    assert store.lease() == Lease("B", 2, T0 + 2 * TTL + 1)


def test_the_same_holder_taking_back_its_expired_lease_bumps_it_too(
        store: Store) -> None:
    store.acquire("A", T0, TTL)
    assert store.acquire("A", T0 + TTL + 1, TTL) == 2
    assert store.acquire("A", T0 + 3 * TTL, TTL) == 3


def test_renew_fails_after_expiry_and_changes_nothing(store: Store) -> None:
    store.acquire("A", T0, TTL)
    before = every_row(store)
    assert not store.renew("A", 1, T0 + TTL + 1, TTL)  # lapsed, even with nobody else
    assert every_row(store) == before
    store.acquire("B", T0 + TTL + 1, TTL)
    before = every_row(store)
    assert not store.renew("A", 1, T0 + TTL + 2, TTL)  # taken over
    assert not store.renew("B", 1, T0 + TTL + 2, TTL)  # right holder, wrong generation
    assert not store.renew("A", 2, T0 + TTL + 2, TTL)  # right generation, wrong holder
    assert every_row(store) == before


def test_release_is_fenced(store: Store) -> None:
    store.acquire("A", T0, TTL)
    before = every_row(store)
    assert not store.release("B", 1, T0 + 1)
    assert not store.release("A", 2, T0 + 1)
    assert not store.release("A", 1, T0 + TTL + 1)  # already lapsed
    assert every_row(store) == before


def test_after_a_release_the_next_taker_need_not_wait_and_bumps_the_generation(
        store: Store, worker: MakeStepWorker) -> None:
    a = worker("A")
    assert a.acquire(T0) == 1
    assert store.release("A", 1, T0 + 5)
    assert store.acquire("B", T0 + 5, TTL) == 2  # no waiting out the TTL
    assert store.release("B", 2, T0 + 6)
    assert store.acquire("B", T0 + 6, TTL) == 3  # even its own released lease


def test_a_released_worker_can_no_longer_claim_or_finish(
        store: Store, worker: MakeStepWorker) -> None:
    store.ingest("chat", "m", "{}", T0)
    a = worker("A")
    a.acquire(T0)
    a.claim(T0)
    assert store.release("A", 1, T0 + 1)
    before = every_row(store)
    assert not a.finish(T0 + 1)
    assert a.claim(T0 + 1) is None
    assert every_row(store) == before


def test_generations_never_go_down(store: Store) -> None:
    seen = [store.acquire("A", T0, TTL)]
    now = T0
    for step, holder in enumerate(["B", "A", "A", "C", "B", "B"]):
        now += TTL + 1 if step % 2 == 0 else 1
        got = store.acquire(holder, now, TTL)
        lease = store.lease()
        assert lease is not None
        seen.append(lease.generation)
        if got is not None:
            assert got == lease.generation
    assert seen == sorted(seen)
    assert seen[-1] > seen[0]


@pytest.mark.sqlite_file
def test_lease_writes_skip_the_disk_wait_and_leave_the_connection_as_it_was(
        store: Store, tmp_path) -> None:
    synchronous = "PRAGMA synchronous"
    assert store.engine.conn.execute(synchronous).fetchone()[0] == 2  # FULL, as opened
    levels: list[str] = []
    store.engine.conn.set_trace_callback(
        lambda sql: levels.append(sql) if sql.startswith("PRAGMA synchronous=") else None)
    assert store.acquire("A", T0, TTL) == 1
    assert store.renew("A", 1, T0 + 1, TTL)
    assert store.release("A", 1, T0 + 2)
    store.engine.conn.set_trace_callback(None)
    # Each lease commit ran under NORMAL, and FULL was put back after it.
    assert levels == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=2"] * 3
    assert store.engine.conn.execute(synchronous).fetchone()[0] == 2
    with sqlite_store(tmp_path / "off.sqlite3", durable=False) as off:
        assert off.acquire("A", T0, TTL) == 1
        assert off.engine.conn.execute(synchronous).fetchone()[0] == 0  # never raised
