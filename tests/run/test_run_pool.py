"""`run --watch --all-users`: processes sharing every inbox, one batch per inbox per round."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from agentbox.ledger.store import Store
from support.handler import logged_batches
from support.processes import wait_for
from support.store import cli_inbox

pytestmark = pytest.mark.slow
QUICK = 5.0


def user_store(home: Path, user: str) -> Store:
    return cli_inbox(home, user)


def ingest(home: Path, user: str, count: int, prefix: str = "m") -> None:
    with user_store(home, user) as store:
        store.ingest_many([("chat", f"{prefix}{n}", "{}") for n in range(count)],
                          int(time.time()))


def event_ids(home: Path, user: str) -> list[int]:
    """The ids of a user's events, oldest first (PostgreSQL numbers every inbox's events
    from one sequence, a file its own)."""
    with user_store(home, user) as store:
        return [e.id for e in store.events(limit=10_000)]


def done(home: Path, user: str) -> int:
    with user_store(home, user) as store:
        return store.status().events["done"]


def test_two_processes_share_the_inboxes_and_handle_each_event_once(
        cli, home, start_watcher, batch_logger) -> None:
    argv, log = batch_logger
    assert cli("config", "set", "--all-users", "max_batch", "2").code == 0
    users = [f"user{n}" for n in range(6)]
    for user in users[:4]:
        ingest(home, user, 5)
    pool = [start_watcher("run", "--watch", "--all-users", "--", *argv, "0.05", name=f"p{n}")
            for n in range(2)]
    for user in users[4:]:  # inboxes that appear while the pool serves
        ingest(home, user, 5)
    wait_for(lambda: all(done(home, u) == 5 for u in users), "every event to be done", 120)
    assert [p.stop(signal.SIGTERM) for p in pool] == [0, 0]

    seen = Counter((b["user"], i) for b in logged_batches(log) for i in b["ids"])
    assert sorted(seen) == sorted((u, i) for u in users for i in event_ids(home, u))
    assert set(seen.values()) == {1}  # nothing handled twice
    assert all(b["env_user"] == b["user"] for b in logged_batches(log))  # AGENTBOX_USER per batch
    assert all(len(b["ids"]) <= 2 for b in logged_batches(log))  # max_batch applies per inbox
    said = [p.printed() for p in pool]
    assert all(line.split(": ", 1)[0] in users for text in said for line in text.splitlines())
    assert all("stopped by SIGTERM" in p.said() for p in pool)


def test_a_flooded_inbox_does_not_starve_a_quiet_one(cli, home, start_watcher,
                                                      batch_logger) -> None:
    argv, log = batch_logger
    assert cli("config", "set", "--all-users", "max_batch", "1").code == 0
    ingest(home, "flood", 500)
    ingest(home, "quiet", 1, "warm-up")  # so the quiet inbox exists from the start
    pool = start_watcher("run", "--watch", "--all-users", "--", *argv, "0.05")
    wait_for(lambda: done(home, "quiet") == 1 and done(home, "flood") >= 3,
             "both inboxes to be served")
    began, ingested_at = time.monotonic(), time.time()
    ingest(home, "quiet", 1, "urgent")
    wait_for(lambda: done(home, "quiet") == 2, "the quiet inbox's new event", QUICK)
    assert time.monotonic() - began < QUICK
    assert done(home, "flood") < 450  # served while the flood was far from drained
    # One batch per inbox per round: the quiet event waited for a flood batch or two
    # (the one under way, and this round's if it came first), not for the flood.
    [urgent] = [b for b in logged_batches(log)
                if b["user"] == "quiet" and b["ids"] == event_ids(home, "quiet")[1:]]
    waited = [b for b in logged_batches(log)
              if b["user"] == "flood" and ingested_at <= b["at"] < urgent["at"]]
    assert len(waited) <= 3, waited
    assert pool.stop(signal.SIGTERM) == 0
    with user_store(home, "flood") as store:
        counts = store.status().events
    assert counts["running"] == 0 and counts["dead"] == 0  # a stopped batch went back


def test_an_inbox_without_a_handler_is_set_aside_with_one_notice(
        cli, home, start_watcher, batch_logger) -> None:
    argv, _ = batch_logger
    assert cli("config", "set", "--all-users", "handler", " ".join([*argv, "0"])).code == 0
    # bob's own handler cannot be started: his inbox waits, alice's is served.
    config = home / "config.toml"
    config.write_text(config.read_text() + '\n[users.bob]\nhandler = "/nonexistent/agent"\n')
    ingest(home, "alice", 1)
    ingest(home, "bob", 1)
    pool = start_watcher("run", "--watch", "--all-users")
    wait_for(lambda: done(home, "alice") == 1, "alice's event")
    pool.wait_said("bob: handler '/nonexistent/agent' not found; looking again every 60s")
    assert pool.stop(signal.SIGTERM) == 0
    assert done(home, "bob") == 0
    assert pool.said().count("bob:") == 1
