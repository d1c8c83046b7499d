"""Store contract, one level up: every inbox at one place, as `run --watch --all-users`
sees them through :func:`agentbox.location.open_inboxes`.

On SQLite the place is a folder of inbox files, on PostgreSQL the rows of one schema;
what a pool is told (who has an inbox, when each next has work, which of them another
process changed) is the same on both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentbox.errors import BadInput, DatabaseError
from agentbox.ledger.inboxes import Inboxes
from agentbox.ledger.store import Store
from agentbox.location import open_inboxes
from agentbox.rules.timers import TimerSpec
from support.clock import T0, TTL
from support.fixtures import Opener
from support.store import POLICY, break_inbox, place_snapshot

PATIENCE = 30.0  # seconds: a wait that should end at once may take this long on a busy machine


@pytest.fixture
def inboxes(place: str) -> Iterator[Inboxes]:
    found = open_inboxes(place)
    yield found
    found.close()


def test_a_place_with_no_inbox_lists_none_and_serves_none(inboxes: Inboxes) -> None:
    assert inboxes.users() == []
    assert inboxes.next_work(T0, []) == {}
    with pytest.raises(DatabaseError, match="alice"):
        inboxes.store("alice")
    assert inboxes.failures() == {}


def test_looking_at_a_place_with_no_inbox_makes_nothing_there(
        inboxes: Inboxes, place: str) -> None:
    """A pool started before any inbox exists lists, schedules and fails nothing, and
    leaves the place as it found it: the first write makes the inbox, not a look."""
    assert place_snapshot(place) is None
    assert (inboxes.users(), inboxes.next_work(T0, []), inboxes.failures()) == ([], {}, {})
    assert place_snapshot(place) is None


def test_the_place_is_named_as_given_and_named_by_a_refusal(
        inboxes: Inboxes, open_inbox: Opener, place: str) -> None:
    """The pool says which place it serves (a URL as given, having no password to hide)
    and a store asked of a user with no inbox there names the place."""
    open_inbox("alice").ingest("chat", "m1", "{}", T0)
    assert inboxes.location == place
    with pytest.raises(DatabaseError) as refused:
        inboxes.store("dave")
    assert str(refused.value).startswith(place)
    assert "dave" in str(refused.value)


def test_every_user_with_an_inbox_is_listed_in_order(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    for user in ("carol", "alice", "bob"):
        open_inbox(user).ingest("chat", "m1", "{}", T0)
    assert inboxes.users() == ["alice", "bob", "carol"]


def test_a_user_is_served_by_one_store_that_reads_that_inbox(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    stored = open_inbox("alice").ingest("chat", "m1", '{"n":1}', T0)
    open_inbox("bob").ingest("chat", "m1", '{"n":2}', T0)
    alice = inboxes.store("alice")
    assert inboxes.store("alice") is alice  # opened once, kept
    assert inboxes.store("bob") is not alice
    assert alice.event(stored.id).payload == '{"n":1}'  # type: ignore[union-attr]
    found = inboxes.store("bob").find("chat", "m1")
    assert found is not None and found.payload == '{"n":2}'
    with pytest.raises(DatabaseError, match="dave"):
        inboxes.store("dave")
    with pytest.raises(BadInput):
        inboxes.store("../alice")  # a name is checked before it names anything


def test_next_work_gives_each_asked_inbox_what_its_store_gives(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    alice, bob, carol, dave = (open_inbox(u) for u in ("alice", "bob", "carol", "dave"))
    alice.ingest("chat", "m1", "{}", T0)                          # work now
    bob.add_timer(TimerSpec(name="digest", due=T0 + 600, every=None), T0)     # work later
    carol.ingest("chat", "m1", "{}", T0)
    carol.acquire("A", T0, TTL)
    assert carol.claim("A", 1, T0, POLICY)                        # running: the lease's end
    dave.ingest("chat", "m1", "{}", T0)
    dave.acquire("A", T0, TTL)
    [claimed] = dave.claim("A", 1, T0, POLICY) or []
    assert dave.finish("A", 1, T0, [claimed.id])                  # nothing left to do
    stores = {"alice": alice, "bob": bob, "carol": carol, "dave": dave}
    everyone = list(stores)
    expected = {user: store.next_work(T0) for user, store in stores.items()}
    assert expected["dave"] is None
    assert inboxes.next_work(T0, everyone) == {u: t for u, t in expected.items()
                                              if t is not None}
    assert inboxes.next_work(T0, everyone)["bob"] == T0 + 600
    assert inboxes.next_work(T0, ["bob", "dave"]) == {"bob": T0 + 600}  # only those asked
    assert inboxes.next_work(T0 + 600, ["bob"]) == {"bob": T0 + 600}   # due: work now
    assert inboxes.next_work(T0, []) == {}
    assert inboxes.failures() == {}


def _wait_in_thread(inboxes: Inboxes, change: threading.Timer) -> set[str] | None:
    """What the waiter reports when ``change`` runs 0.3 s into its wait (it slept until then)."""
    waiter = inboxes.waiter()
    try:
        began = time.monotonic()
        change.start()
        found = waiter.wait(PATIENCE)
        assert time.monotonic() - began >= 0.25
        change.join()
        return found
    finally:
        waiter.close()


def test_the_waiter_names_the_inbox_another_connection_changed(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    """A pool sleeps only while no inbox has work now, so what must wake it is a change
    that gives an inbox work: on PostgreSQL an ingest into an inbox with events already
    waiting notifies nobody (the pool is not asleep on its account)."""
    for user in ("alice", "bob"):
        open_inbox(user).add_timer(TimerSpec(name="digest", due=T0 + 600, every=None), T0)
    bob = open_inbox("bob")
    assert inboxes.next_work(T0, ["alice", "bob"]) == {"alice": T0 + 600, "bob": T0 + 600}
    found = _wait_in_thread(inboxes, threading.Timer(
        0.3, lambda: bob.ingest("chat", "m1", "{}", T0)))
    # None would mean "look at every inbox": allowed, but a ring names what it can.
    assert found == {"bob"}


def test_the_waiter_names_an_inbox_made_while_it_waits(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    open_inbox("alice").ingest("chat", "m0", "{}", T0)
    assert inboxes.users() == ["alice"]
    found = _wait_in_thread(inboxes, threading.Timer(
        0.3, lambda: open_inbox("carol").ingest("chat", "m1", "{}", T0)))
    assert found == {"carol"}
    assert inboxes.users() == ["alice", "carol"]


def test_the_waiter_sleeps_through_writes_made_through_its_own_stores(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    open_inbox("alice").ingest("chat", "m0", "{}", T0)
    mine: Store = inboxes.store("alice")
    waiter = inboxes.waiter()
    try:
        mine.ingest("chat", "m1", "{}", T0)
        mine.acquire("A", T0, TTL)
        assert mine.claim("A", 1, T0, POLICY)
        began = time.monotonic()
        assert waiter.wait(0.5) == set()
        assert time.monotonic() - began >= 0.45
    finally:
        waiter.close()


def test_an_inbox_that_cannot_be_read_is_left_out_and_named_once(
        inboxes: Inboxes, open_inbox: Opener, place: str) -> None:
    alice = open_inbox("alice")
    alice.ingest("chat", "m1", "{}", T0)
    alice.close()
    break_inbox(place, "alice")
    assert "alice" not in inboxes.next_work(T0, ["alice"])
    failed = inboxes.failures()
    assert list(failed) == ["alice"] and failed["alice"]  # why, for the pool to log
    assert inboxes.failures() == {}  # each failure is told once
    assert "alice" not in inboxes.next_work(T0, ["alice"])
    assert list(inboxes.failures()) == ["alice"]  # and again at the next failed look


def test_closing_closes_every_store_it_handed_out(
        inboxes: Inboxes, open_inbox: Opener) -> None:
    open_inbox("alice").ingest("chat", "m1", "{}", T0)
    alice = inboxes.store("alice")
    assert alice.status().events["pending"] == 1
    inboxes.close()
    with pytest.raises(DatabaseError):
        alice.status()
