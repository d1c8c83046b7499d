"""Store contract: a waiter wakes for another connection's changes, never for its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from support.clock import T0, TTL
from support.store import POLICY

PATIENCE = 30.0  # seconds: a wait that should end at once may take this long on a busy machine


def _woken_by(waiter_store: Store, change: Callable[[], object]) -> None:
    """A waiter on ``waiter_store`` sleeps until ``change()``, run 0.3 s later in another
    thread, and no longer than that takes to be seen."""
    waiter = waiter_store.waiter()
    try:
        worker = threading.Timer(0.3, change)
        began = time.monotonic()
        worker.start()
        assert waiter.wait(PATIENCE)
        assert time.monotonic() - began >= 0.25  # it slept until the change came
        worker.join()
    finally:
        waiter.close()


def test_an_ingest_elsewhere_wakes_the_waiter(backend: Store, twin: Store) -> None:
    _woken_by(backend, lambda: twin.ingest("chat", "m1", "{}", T0))
    assert backend.status().events["pending"] == 1


def test_a_finished_run_elsewhere_wakes_the_waiter(backend: Store, twin: Store) -> None:
    event_id = twin.ingest("chat", "m1", "{}", T0).id
    twin.acquire("A", T0, TTL)
    twin.claim("A", 1, T0, POLICY)

    def finish() -> None:
        assert twin.finish("A", 1, T0, [event_id], Answer(messages=(Message("hi"),)))

    _woken_by(backend, finish)
    assert backend.status().outbox["held"] == 1


def test_own_changes_do_not_wake_the_waiter(backend: Store) -> None:
    waiter = backend.waiter()
    try:
        backend.ingest("chat", "m1", "{}", T0)
        backend.acquire("A", T0, TTL)
        assert backend.renew("A", 1, T0 + 1, TTL)
        began = time.monotonic()
        assert not waiter.wait(0.5)
        assert time.monotonic() - began >= 0.45
    finally:
        waiter.close()


def test_a_change_before_the_wait_returns_at_once(backend: Store, twin: Store) -> None:
    waiter = backend.waiter()
    try:
        twin.ingest("chat", "m1", "{}", T0)
        time.sleep(0.05)  # let the commit land; the waiter must not have missed it
        began = time.monotonic()
        assert waiter.wait(PATIENCE)
        assert time.monotonic() - began < PATIENCE
        assert not waiter.wait(0.2)  # and it counts once
    finally:
        waiter.close()


def test_a_wait_with_no_time_left_still_looks_and_returns_at_once(
        backend: Store, twin: Store) -> None:
    """A caller too busy to sleep asks with a timeout of 0 (or less, its deadline passed):
    it learns of a change made meanwhile, and is never kept waiting for nothing."""
    def timed(timeout: float) -> tuple[bool, float]:
        began = time.monotonic()
        return waiter.wait(timeout), time.monotonic() - began

    waiter = backend.waiter()
    try:
        for timeout in (0.0, -1.0):
            found, took = timed(timeout)
            assert not found
            assert took < 0.9  # a wait of a second would be one for nothing
        twin.ingest("chat", "m1", "{}", T0)
        given_up = time.monotonic() + PATIENCE
        while not (done := timed(0.0))[0]:  # seen by a look, however soon the commit lands
            assert time.monotonic() < given_up
            time.sleep(0.01)
        assert done[1] < 0.9  # the change found, the wait returns with it
    finally:
        waiter.close()
