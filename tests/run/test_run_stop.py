"""A stop asked for while a run claims, in-process: what the run reports."""

from __future__ import annotations

from pathlib import Path

from agentbox.rules.policy import Policy
from agentbox.stopping import Stop
from agentbox.worker import Worker
from support.clock import T0
from support.sqlite import sqlite_store


def test_a_stop_that_comes_during_an_empty_claim_leaves_the_run_idle(tmp_path: Path) -> None:
    """A watcher stopped while it looks at an empty inbox reports no interrupted run."""
    with sqlite_store(tmp_path / "alice.sqlite3") as store:
        worker = Worker(store=store, policy=Policy(), handler=None,  # type: ignore[arg-type]
                        user="alice", db=store.location, clock=lambda: T0,
                        stop=Stop(signum=15))
        generation = store.acquire(worker.holder, T0, 120)
        assert generation is not None
        assert worker.work(generation).outcome == "idle"
        store.ingest("chat", "m1", "{}", T0)
        report = worker.work(generation)  # with an event claimed, the stop is honoured
        assert (report.outcome, report.events) == ("interrupted", (1,))
        assert store.find("chat", "m1").status == "pending"  # given back
