"""LISTEN/NOTIFY as the waiters read it: whose notifications count, every notification
queued is taken at once, and a listening connection the server dropped is opened again
with a wake-up, since what happened meanwhile is unknown."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from agentbox.backends.postgres.url import parse
from agentbox.ledger.store import Store
from agentbox.location import open_inboxes
from support.clock import T0
from support.fixtures import Opener

pytestmark = pytest.mark.postgres_only
PATIENCE = 30.0


def notify(url: str, payload: str) -> None:
    """A notification on the schema's channel from a session of the test's own."""
    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (target.schema, payload))


def drop_session(url: str, pid: int) -> None:
    target = parse(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_notifications_about_other_inboxes_or_of_no_inbox_wake_nobody(
        store: Store, open_inbox: Opener, pg_url: str) -> None:
    other_store = open_inbox("bob")
    waiter = store.waiter()
    try:
        notify(pg_url, str(other_store.inbox_id))
        notify(pg_url, "not an inbox id")
        notify(pg_url, "")
        began = time.monotonic()
        assert not waiter.wait(0.5)
        assert time.monotonic() - began >= 0.45  # it slept the whole wait through them
        notify(pg_url, str(store.inbox_id))
        assert waiter.wait(PATIENCE)
    finally:
        waiter.close()


def test_every_notification_queued_is_taken_in_one_wait(pg_url: str,
                                                         open_inbox: Opener) -> None:
    stores = {user: open_inbox(user) for user in ("alice", "bob", "carol")}
    inboxes = open_inboxes(pg_url)
    waiter = inboxes.waiter()
    try:
        for user in ("alice", "carol"):
            notify(pg_url, str(stores[user].inbox_id))
        time.sleep(0.2)  # both are queued on the listening connection before it waits
        assert waiter.wait(PATIENCE) == {"alice", "carol"}
        assert waiter.wait(0) == set()  # none left over for the next wait
    finally:
        waiter.close()
        inboxes.close()


def test_a_dropped_listening_connection_wakes_the_waiter_and_is_opened_again(
        store: Store, open_inbox: Opener, pg_url: str) -> None:
    twin = open_inbox("alice")
    waiter = store.waiter()
    try:
        listening = waiter.listener.conn.info.backend_pid  # type: ignore[attr-defined]
        threading.Timer(0.3, drop_session, (pg_url, listening)).start()
        began = time.monotonic()
        assert waiter.wait(PATIENCE)  # at once, not after PATIENCE
        assert time.monotonic() - began < PATIENCE / 2
        assert waiter.listener.conn.info.backend_pid != listening  # type: ignore[attr-defined]
        assert not waiter.wait(0.2)
        ingest = threading.Timer(0.3, lambda: twin.ingest("chat", "m1", "{}", T0))
        ingest.start()
        assert waiter.wait(PATIENCE)  # the new connection listens
        ingest.join()  # woken by the commit, before the ingest is back: twin is closed next
    finally:
        waiter.close()


def test_a_pool_whose_listening_connection_dropped_looks_at_every_inbox(
        pg_url: str, open_inbox: Opener) -> None:
    alice = open_inbox("alice")
    inboxes = open_inboxes(pg_url)
    waiter = inboxes.waiter()
    try:
        drop_session(pg_url, waiter.listener.conn.info.backend_pid)  # type: ignore[attr-defined]
        assert waiter.wait(PATIENCE) is None  # which inboxes changed meanwhile is unknown
        ingest = threading.Timer(0.3, lambda: alice.ingest("chat", "m1", "{}", T0))
        ingest.start()
        assert waiter.wait(PATIENCE) == {"alice"}
        ingest.join()
    finally:
        waiter.close()
        inboxes.close()
