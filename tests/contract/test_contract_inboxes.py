"""Store contract: two users' inboxes never see or wait for each other.

On SQLite they are two files; on PostgreSQL two rows of ``inboxes`` sharing
every table, which is what this file is for.
"""

from __future__ import annotations

from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, ApprovalRequest, Message
from agentbox.rules.outbox import Dispatch
from agentbox.rules.timers import TimerSpec
from support.clock import T0, TTL
from support.fixtures import Opener
from support.store import POLICY, run


def test_two_inboxes_keep_apart_in_everything(backend: Store, other_backend: Store) -> None:
    mine = backend.ingest("chat", "m1", '{"n":1}', T0)
    theirs = other_backend.ingest("chat", "m1", '{"n":2}', T0)  # the same key: no conflict
    assert (mine.outcome, theirs.outcome) == ("stored", "stored")
    seen, their_seen = backend.find("chat", "m1"), other_backend.find("chat", "m1")
    assert seen is not None and seen.payload == '{"n":1}' == backend.event(mine.id).payload  # type: ignore[union-attr]
    assert their_seen is not None and their_seen.payload == '{"n":2}'
    assert [e.action for e in other_backend.story(theirs.id)] == ["stored"]

    # One lease each: both take generation 1 at the same moment.
    assert (backend.acquire("A", T0, TTL), other_backend.acquire("B", T0, TTL)) == (1, 1)
    assert not backend.renew("B", 1, T0, TTL)
    [claimed] = backend.claim("A", 1, T0, POLICY) or []
    assert claimed.id == mine.id
    assert other_backend.claim("A", 1, T0, POLICY) is None  # A holds no lease there
    assert not other_backend.finish("B", 1, T0, [mine.id])  # not an event of theirs
    assert backend.finish("A", 1, T0, [mine.id],
                          Answer(messages=(Message("hello"),),
                                 approvals=(ApprovalRequest("r1", 3600, "refund"),)))
    assert backend.release("A", 1, T0)

    backend.add_timer(TimerSpec(name="digest", due=T0, every=60), T0)
    assert other_backend.timers() == [] and other_backend.tick(T0) == 0
    assert other_backend.approvals(T0) == []
    assert other_backend.answer_approval("r1", "yes", T0) == "unknown"
    assert other_backend.outbox() == []
    assert other_backend.claim_dispatch(T0, "at-least-once", 0, 60).held == 0  # type: ignore[union-attr]
    sent = backend.claim_dispatch(T0, "at-least-once", 0, 60)
    assert isinstance(sent, Dispatch) and sent.body == "hello"
    assert not other_backend.settle_dispatch(sent.key, "sent", T0, attempt=1)
    assert backend.settle_dispatch(sent.key, "sent", T0, attempt=1)

    assert backend.status().events == {"pending": 0, "running": 0, "done": 1, "dead": 0}
    assert backend.status().outbox["sent"] == 1
    assert other_backend.status().events == {"pending": 1, "running": 0, "done": 0, "dead": 0}
    assert other_backend.status().outbox["sent"] == 0
    assert other_backend.lease() is not None and other_backend.lease().holder == "B"  # type: ignore[union-attr]
    _, batch = run(other_backend, "B", T0 + 1)
    assert [e.id for e in batch] == [theirs.id]


def test_stores_opened_on_one_inbox_before_and_after_a_write_see_the_same(
        backend: Store, twin: Store, open_inbox: Opener) -> None:
    """Two stores opened on one inbox before its first write, and one opened after it,
    see the same rows; each knows the inbox's row id as it opens."""
    stored = backend.ingest("chat", "m1", "{}", T0)
    assert twin.find("chat", "m1") == backend.find("chat", "m1") is not None
    assert twin.status().events["pending"] == 1
    again = open_inbox("alice")
    assert again.inbox_id == backend.inbox_id == twin.inbox_id  # known as it opens
    assert again.event(stored.id) == backend.event(stored.id)

