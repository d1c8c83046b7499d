"""Store contract: approval links are signed by the inbox, checked without a write,
made invalid by a rotation, and linked from messages only to approvals that exist."""

from __future__ import annotations

import pytest

from agentbox.dispatcher import Dispatcher, PrintSender
from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, ApprovalRequest, Message
from agentbox.rules.outbox import Dispatch
from support.clock import T0
from support.store import POLICY, run, say, store_snapshot

H = 3_600
URL = "https://agent.example/box"


def token_of(store: Store, approval_id: str, user: str = "alice") -> str:
    approval = store.approval(approval_id, T0)
    assert approval is not None
    return store.approval_token(user, approval)


def test_a_token_leads_to_its_approval_and_only_its_own(backend: Store) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    backend.request_approval("a2", T0, 2 * H, "refund order 2")
    one, two = token_of(backend, "a1"), token_of(backend, "a2")
    found = backend.approval_of_token("alice", one, T0)
    assert found is not None and (found.id, found.outcome) == ("a1", "pending")
    assert backend.approval_of_token("alice", two, T0).id == "a2"  # type: ignore[union-attr]
    assert backend.approval_of_token("bob", one, T0) is None  # signed for alice


@pytest.mark.parametrize("change", [
    lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the signature
    lambda t: "x" + t,  # the claims
    lambda t: t.replace(".", ""),
    lambda t: "",
    lambda t: t + t,
])
def test_an_altered_token_leads_nowhere(backend: Store, change: object) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    altered = change(token_of(backend, "a1"))  # type: ignore[operator]
    assert backend.approval_of_token("alice", altered, T0) is None


def test_a_token_naming_another_deadline_is_refused(backend: Store) -> None:
    from agentbox.rules.links import token

    backend.request_approval("a1", T0, H, "refund order 1")
    forged = token(backend.link_secret(), "alice", "a1", T0 + 99 * H)
    assert backend.approval_of_token("alice", forged, T0) is None


def test_another_inboxs_token_is_refused(backend: Store, other_backend: Store) -> None:
    for store in (backend, other_backend):
        store.request_approval("a1", T0, H, "refund order 1")
    theirs = token_of(other_backend, "a1", "alice")  # same user name, other secret
    assert backend.approval_of_token("alice", theirs, T0) is None
    assert other_backend.approval_of_token("alice", theirs, T0) is not None


def test_rotating_invalidates_every_earlier_link(backend: Store, twin: Store) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    old = token_of(backend, "a1")
    csrf = backend.link_csrf(old)
    twin.rotate_links(T0)
    assert backend.approval_of_token("alice", old, T0) is None
    assert not backend.check_link_csrf(old, csrf)
    new = token_of(backend, "a1")
    assert new != old and twin.approval_of_token("alice", new, T0) is not None
    assert [e.action for e in backend.history("approval", "*")] == ["links rotated"]


def test_checking_a_token_writes_nothing(backend: Store) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    before = store_snapshot(backend)
    assert backend.approval_of_token("alice", "bm90aGluZw." + "A" * 43, T0) is None
    assert not backend.check_link_csrf("bm90aGluZw." + "A" * 43, "x")
    assert store_snapshot(backend) == before


def test_the_csrf_token_is_bound_to_its_link(backend: Store) -> None:
    backend.request_approval("a1", T0, H, "one")
    backend.request_approval("a2", T0, H, "two")
    one, two = token_of(backend, "a1"), token_of(backend, "a2")
    assert backend.check_link_csrf(one, backend.link_csrf(one))
    assert not backend.check_link_csrf(one, backend.link_csrf(two))
    assert not backend.check_link_csrf(one, None)


def test_a_message_may_link_an_approval_of_its_answer_or_a_pending_one(backend: Store) -> None:
    backend.request_approval("old", T0, H, "old one")
    run(backend, "w", T0, Answer(
        messages=(Message("ok? {approval:new} and {approval:old}"),),
        approvals=(ApprovalRequest("new", H, "new one"),)))
    [message] = backend.outbox()
    assert message.body == "ok? {approval:new} and {approval:old}"  # linked when sent


@pytest.mark.parametrize("setup", ["never requested", "answered", "expired"])
def test_a_message_linking_no_pending_approval_is_refused_whole(backend: Store,
                                                                setup: str) -> None:
    if setup != "never requested":
        backend.request_approval("gone", T0 - 2 * H, H, "gone")
    if setup == "answered":
        backend.answer_approval("gone", "yes", T0 - 2 * H + 1)
    backend.ingest("chat", "m1", {"text": "hi"}, T0)
    generation = backend.acquire("w", T0, POLICY.lease_ttl)
    assert generation is not None
    batch = backend.claim("w", generation, T0, POLICY)
    assert batch
    with pytest.raises(BadInput, match="gone"):
        backend.finish("w", generation, T0, [e.id for e in batch], Answer(
            messages=(Message("ok? {approval:gone}"),),
            approvals=(ApprovalRequest("fresh", H, "fresh"),)))
    assert backend.outbox() == [] and backend.approval("fresh", T0) is None
    assert backend.event(batch[0].id).status == "running"  # type: ignore[union-attr]


@pytest.mark.parametrize("reply", ["yes", "no"])
def test_an_approval_answered_before_its_deadline_is_no_longer_pending(backend: Store,
                                                                      reply: str) -> None:
    """Pending means unanswered and unexpired: an approval answered (either way) before
    its deadline may not be linked, while one beside it still waiting may."""
    backend.request_approval("done", T0, H, "answered")
    backend.request_approval("open", T0, H, "waiting")
    assert backend.answer_approval("done", reply, T0 + 1) == reply
    backend.ingest("chat", "m1", {"text": "hi"}, T0 + 2)
    generation = backend.acquire("w", T0 + 2, POLICY.lease_ttl)
    assert generation is not None
    batch = backend.claim("w", generation, T0 + 2, POLICY)
    assert batch
    ids = [e.id for e in batch]
    with pytest.raises(BadInput, match="done"):
        backend.finish("w", generation, T0 + 2, ids, Answer(
            messages=(Message("ok? {approval:open} {approval:done}"),)))
    assert backend.finish("w", generation, T0 + 2, ids, Answer(
        messages=(Message("ok? {approval:open}"),)))
    assert [m.body for m in backend.outbox()] == ["ok? {approval:open}"]


def sent_bodies(store: Store, public_url: str | None, user: str = "alice") -> list[str]:
    bodies: list[str] = []

    def write(dispatch: Dispatch) -> None:
        bodies.append(dispatch.body)

    Dispatcher(store, POLICY, PrintSender(write), lambda: T0 + 10, user=user,
               public_url=public_url).dispatch_once()
    return bodies


def test_dispatch_sends_the_link_in_place_of_the_placeholder(backend: Store) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    say(backend, T0, "Refund? {approval:a1}")
    [body] = sent_bodies(backend, URL)
    assert body == f"Refund? {URL}/a/{token_of(backend, 'a1')}"
    [message] = backend.outbox(("sent",))
    assert message.body == "Refund? {approval:a1}"  # the stored body keeps the placeholder


def test_without_public_url_the_placeholder_names_the_command(backend: Store) -> None:
    backend.request_approval("a1", T0, H, "refund order 1")
    say(backend, T0, "Refund? {approval:a1}")
    assert sent_bodies(backend, None) == ["Refund? `agentbox approve answer a1 yes|no`"]
