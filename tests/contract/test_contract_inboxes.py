"""Store contract: two users' inboxes never see or wait for each other.

On SQLite they are two files; on PostgreSQL two rows of ``inboxes`` sharing
every table, which is what this file is for.
"""

from __future__ import annotations

from agentbox.rules.answer import Answer, ApprovalRequest, Message
from agentbox.rules.outbox import Dispatch
from agentbox.rules.timers import TimerSpec
from agentbox.store import Store

from .kit import POLICY, TTL, T, run


def test_two_inboxes_keep_apart_in_everything(backend: Store, other_backend: Store) -> None:
    mine = backend.ingest("chat", "m1", '{"n":1}', T)
    theirs = other_backend.ingest("chat", "m1", '{"n":2}', T)  # the same key: no conflict
    assert (mine.outcome, theirs.outcome) == ("stored", "stored")
    seen, their_seen = backend.find("chat", "m1"), other_backend.find("chat", "m1")
    assert seen is not None and seen.payload == '{"n":1}' == backend.event(mine.id).payload  # type: ignore[union-attr]
    assert their_seen is not None and their_seen.payload == '{"n":2}'
    assert [e.action for e in other_backend.story(theirs.id)] == ["stored"]

    # One lease each: both take generation 1 at the same moment.
    assert (backend.acquire("A", T, TTL), other_backend.acquire("B", T, TTL)) == (1, 1)
    assert not backend.renew("B", 1, T, TTL)
    [claimed] = backend.claim("A", 1, T, POLICY) or []
    assert claimed.id == mine.id
    assert other_backend.claim("A", 1, T, POLICY) is None  # A holds no lease there
    assert not other_backend.finish("B", 1, T, [mine.id])  # not an event of theirs
    assert backend.finish("A", 1, T, [mine.id],
                          Answer(messages=(Message("hello"),),
                                 approvals=(ApprovalRequest("r1", 3600, "refund"),)))
    assert backend.release("A", 1, T)

    backend.add_timer(TimerSpec(name="digest", due=T, every=60), T)
    assert other_backend.timers() == [] and other_backend.tick(T) == 0
    assert other_backend.approvals(T) == []
    assert other_backend.answer_approval("r1", "yes", T) == "unknown"
    assert other_backend.outbox() == []
    assert other_backend.claim_dispatch(T, "at-least-once", 0, 60).held == 0  # type: ignore[union-attr]
    sent = backend.claim_dispatch(T, "at-least-once", 0, 60)
    assert isinstance(sent, Dispatch) and sent.body == "hello"
    assert not other_backend.settle_dispatch(sent.key, "sent", T, attempt=1)
    assert backend.settle_dispatch(sent.key, "sent", T, attempt=1)

    assert backend.status().events == {"pending": 0, "running": 0, "done": 1, "dead": 0}
    assert backend.status().outbox["sent"] == 1
    assert other_backend.status().events == {"pending": 1, "running": 0, "done": 0, "dead": 0}
    assert other_backend.status().outbox["sent"] == 0
    assert other_backend.lease() is not None and other_backend.lease().holder == "B"  # type: ignore[union-attr]
    _, batch = run(other_backend, "B", T + 1)
    assert [e.id for e in batch] == [theirs.id]
