"""The all-users pool on PostgreSQL, in-process: what one round does to inboxes that other
pools share."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from agentbox.backends.postgres.inboxes import PostgresInboxes
from agentbox.ledger.store import Store
from agentbox.pool import Pool
from agentbox.rules.answer import Answer
from agentbox.rules.policy import Policy
from agentbox.worker import Batch, Handled, Worker

pytestmark = pytest.mark.postgres_only

NOW = 1_700_000_000


class Recording:
    """A handler that notes each batch's user and event keys and answers nothing."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[str]]] = []

    def check(self) -> None:
        pass

    def handle(self, batch: Batch, heartbeat: Callable[[], bool], every: float) -> Handled:
        self.seen.append((batch.user, [e.source_id for e in batch.events]))
        return Handled(answer=Answer())


def worker(user: str, store: Store, handler: Recording) -> Worker:
    return Worker(store=store, policy=Policy(max_batch=1), handler=handler, user=user,
                  db=store.location, clock=lambda: NOW)


@pytest.fixture
def pool_of(pg_url: str) -> Iterator[Callable[[Recording], Pool]]:
    opened: list[PostgresInboxes] = []

    def make(handler: Recording) -> Pool:
        inboxes = PostgresInboxes(pg_url)
        opened.append(inboxes)
        return Pool(inboxes, lambda user, store: worker(user, store, handler),
                    lambda: NOW, emit=lambda user, report: None, say=lambda line: None)

    yield make
    for inboxes in opened:
        inboxes.close()


def test_a_round_passes_over_an_inbox_another_pool_emptied_since_it_began(
        pool_of: Callable[[Recording], Pool], open_inbox: Callable[..., Store]) -> None:
    for user in ("alice", "bob"):
        open_inbox(user).ingest("chat", f"{user}-1", "{}", NOW)
    handler = Recording()
    pool = pool_of(handler)
    ready = pool._ready(None)
    assert sorted(ready) == ["alice", "bob"]
    # Meanwhile another host's pool handles alice's only event.
    other = Recording()
    assert worker("alice", open_inbox("alice"), other).run_once().outcome == "done"
    alice = open_inbox("alice")
    lease = alice.lease()
    assert lease is not None and other.seen == [("alice", ["alice-1"])]

    assert pool._round(sorted(ready)) == {"bob"}
    assert handler.seen == [("bob", ["bob-1"])]
    # alice's lease was not taken and given back for an empty claim.
    assert alice.lease() == lease
    assert [e.action for e in alice.story(alice.events()[0].id)] == ["stored", "claimed",
                                                                       "finished"]
