"""Watchers on PostgreSQL: woken by LISTEN/NOTIFY from other hosts, standing by, pooling.

Every process here is a real `agentbox run --watch` with its own sessions,
as separate hosts would run them.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.ledger.store import Store
from support.handler import logged_batches
from support.processes import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]

Inbox = Callable[..., Store]


def test_a_watcher_is_woken_by_an_ingest_on_another_host_and_a_standby_takes_over(
        start_watcher: Any, batch_logger: tuple[list[str], Path], pg_url: str,
        open_inbox: Inbox) -> None:
    argv, log = batch_logger
    env = {"AGENTBOX_DB": pg_url}
    first = start_watcher("run", "--watch", "--", *argv, "0", name="first", env=env)
    first.wait_said("watching")
    store = open_inbox()
    began = time.time()
    store.ingest("chat", "m1", "{}", int(began))
    wait_for(lambda: store.status().events["done"] == 1, "the watcher to finish the event")
    assert logged_batches(log)[0]["at"] - began < 10  # woken by the notification, not a late poll
    standby = start_watcher("run", "--watch", "--", *argv, "0", name="standby", env=env)
    standby.wait_said("standing by")
    assert first.stop(signal.SIGTERM) == 0
    standby.wait_said("watching with the lease (generation 2)")
    store.ingest("chat", "m2", "{}", int(time.time()))
    wait_for(lambda: store.status().events["done"] == 2, "the standby to finish the event")
    assert standby.stop(signal.SIGTERM) == 0
    assert [b["ids"] for b in logged_batches(log)] == [[1], [2]]


def test_pools_on_two_hosts_share_every_inbox_and_handle_each_event_once(
        cli: Any, start_watcher: Any, batch_logger: tuple[list[str], Path], pg_url: str,
        open_inbox: Inbox) -> None:
    argv, log = batch_logger
    assert cli("config", "set", "--all-users", "max_batch", "2").code == 0
    users = [f"user{n}" for n in range(6)]

    def ingest(user: str) -> None:
        open_inbox(user).ingest_many([("chat", f"m{n}", "{}") for n in range(5)], int(time.time()))

    for user in users[:4]:
        ingest(user)
    pools = [start_watcher("run", "--watch", "--all-users", "--", *argv, "0.05",
                           name=f"pool{n}", env={"AGENTBOX_DB": pg_url}) for n in range(2)]
    for user in users[4:]:  # inboxes made while the pools serve
        ingest(user)
    inboxes = [open_inbox(u) for u in users]  # one connection each, not one per poll
    wait_for(lambda: all(inbox.status().events["done"] == 5 for inbox in inboxes),
             "every event of every inbox to be done", 120)
    assert [p.stop(signal.SIGTERM) for p in pools] == [0, 0]
    seen = Counter((b["user"], i) for b in logged_batches(log) for i in b["ids"])
    assert sorted(user for user, _ in seen) == sorted(u for u in users for _ in range(5))
    assert set(seen.values()) == {1}  # nothing handled twice
    assert all(b["env_user"] == b["user"] and len(b["ids"]) <= 2 for b in logged_batches(log))
