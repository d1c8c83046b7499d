"""The all-users pool's hourly look for due prunes, in-process: a quiet round looks at a
bounded number of inboxes, so new work never waits behind thousands of looks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.backends.sqlite.inboxes import SqliteInboxes
from agentbox.ledger.store import Store
from agentbox.pool import UPKEEP_LOOKS, Pool
from agentbox.rules.policy import Policy
from agentbox.upkeep import PruneReport
from agentbox.worker import Worker
from support.clock import T0
from support.sqlite import sqlite_store


def test_a_quiet_round_looks_at_a_bounded_number_of_inboxes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    users = [f"user{n:03d}" for n in range(2 * UPKEEP_LOOKS + 5)]
    for user in users:
        sqlite_store(tmp_path / f"{user}.sqlite3").close()
    looked: list[str] = []

    def prune_if_due(self: Worker) -> PruneReport | None:
        looked.append(self.user)
        return None  # not due

    monkeypatch.setattr(Worker, "prune_if_due", prune_if_due)

    def worker_for(user: str, store: Store) -> Worker:
        return Worker(store=store, policy=Policy(), handler=None, user=user,  # type: ignore[arg-type]  # no batch runs here
                      db=store.location, clock=lambda: T0)

    inboxes = SqliteInboxes(tmp_path)
    try:
        pool = Pool(inboxes, worker_for, lambda: T0, emit=lambda user, report: None,
                    say=lambda line: None)
        # Looks remain after each of the first two rounds: the pool goes on without sleeping.
        assert pool._upkeep() is True
        assert len(looked) == UPKEEP_LOOKS
        assert pool._upkeep() is True
        assert len(looked) == 2 * UPKEEP_LOOKS
        assert pool._upkeep() is False
        assert sorted(looked) == users  # each inbox once
        assert pool._upkeep() is False  # none is due another look within the hour
        assert len(looked) == len(users)
    finally:
        inboxes.close()
