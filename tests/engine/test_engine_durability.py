"""Which of the ledger's writes wait for the disk: each transaction asks its engine for a
durable commit or not, and only a write whose loss in a power cut would break a promise
must wait. Seen here as the ``durable`` each write asks for, on every engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from agentbox.ledger.store import Store
from support.clock import T0, TTL


@pytest.fixture
def asked(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """The ``durable`` of every write transaction the store opens from now on."""
    found: list[bool] = []
    write = store.engine.write

    def noted(box: int, *, durable: bool) -> AbstractContextManager[Any]:
        found.append(durable)
        return write(box, durable=durable)

    monkeypatch.setattr(store.engine, "write", noted)
    yield found


def test_only_an_at_most_once_step_s_start_waits_for_the_disk(
        store: Store, asked: list[bool]) -> None:
    """A lost ``started`` line runs an at-least-once step again, as it allows; an
    at-most-once step would run twice, so its start is on disk before it runs."""
    assert store.acquire("A", T0, TTL) == 1
    asked.clear()
    assert store.begin_step("A", 1, "once", T0, "at-most-once").action == "run"
    assert store.begin_step("A", 1, "again", T0, "at-least-once").action == "run"
    assert asked == [True, False]


def test_lease_writes_do_not_wait_for_the_disk(store: Store, asked: list[bool]) -> None:
    """A lease lost to a power cut is one nothing durable used yet: the first durable
    commit after it (a claim, a finish) carries it to disk."""
    assert store.acquire("A", T0, TTL) == 1
    assert store.renew("A", 1, T0 + 1, TTL)
    assert store.release("A", 1, T0 + 2)
    assert asked == [False, False, False]


def test_a_claim_and_a_finish_wait_for_the_disk(store: Store, asked: list[bool]) -> None:
    from support.store import run

    store.ingest("s", "1", "{}", T0)
    asked.clear()
    run(store, "A", T0)
    assert asked == [False, True, True, False]  # acquire, claim, finish, release
