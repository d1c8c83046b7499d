"""A watching worker prunes too: `run --watch` when it idles, the all-users pool inbox by
inbox, each at most once a day."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from agentbox.rules.policy import Policy
from support.store import cli_inbox

pytestmark = pytest.mark.slow
OLD = 40 * 86400  # past keep_done (30 days)


def finished_long_ago(home: Path, user: str, count: int) -> None:
    """``count`` events that arrived and were done 40 days ago."""
    then = int(time.time()) - OLD
    with cli_inbox(home, user) as store:
        store.ingest_many([("chat", f"old-{n}", "{}") for n in range(count)], then)
        generation = store.acquire("w:1:x", then, 60)
        assert generation is not None
        claimed = store.claim("w:1:x", generation, then, Policy(max_batch=count))
        assert claimed is not None and store.finish("w:1:x", generation, then,
                                                    [e.id for e in claimed])
        assert store.release("w:1:x", generation, then)


def done(home: Path, user: str) -> int:
    with cli_inbox(home, user) as store:
        return store.status().events["done"]


def test_a_watcher_prunes_when_it_idles(home, start_watcher, handler) -> None:
    finished_long_ago(home, "alice", 4)
    watcher = start_watcher("run", "--watch", "--", *handler)
    watcher.wait_said("pruned 4 done event(s)")  # the newest too
    assert done(home, "alice") == 0
    assert watcher.stop(signal.SIGTERM) == 0
    assert watcher.said().count("pruned") == 1  # at most once a day


def test_the_pool_prunes_every_quiet_inbox(home, start_watcher, handler) -> None:
    for user in ("alice", "bob"):
        finished_long_ago(home, user, 3)
    pool = start_watcher("run", "--watch", "--all-users", "--", *handler)
    pool.wait_said("alice: pruned 3 done event(s)")
    pool.wait_said("bob: pruned 3 done event(s)")
    assert (done(home, "alice"), done(home, "bob")) == (0, 0)
    assert pool.stop(signal.SIGTERM) == 0
