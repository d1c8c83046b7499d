"""Approval links over loopback: a real client against a real `agentbox serve`.

The page never records anything on a GET; the POST needs the page's CSRF token
and answers as `approve answer` does; every token the inbox did not sign now
(forged, altered, rotated, another inbox's) is the same 404.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentbox.ledger.store import Store
from support.clock import T0_2023
from support.fixtures import Opener
from support.pages import check_security_headers, fetch
from support.serving import Served
from support.store import store_snapshot

pytestmark = pytest.mark.slow

Serve = Callable[..., Served]
H = 3_600
NOW = T0_2023  # the served process's clock


def ask(store: Store, approval_id: str = "a1", action: str = "refund order 1",
        at: int = NOW, expires_in: int = H) -> str:
    """Request an approval; its link's path."""
    store.request_approval(approval_id, at, expires_in, action)
    approval = store.approval(approval_id, at)
    assert approval is not None
    return f"/a/{store.approval_token('alice', approval)}"


def test_the_page_shows_the_action_and_a_get_records_nothing(serve: Serve,
                                                             store: Store) -> None:
    link = ask(store)
    served = serve()
    before = store_snapshot(store)
    first = fetch(served.port, "GET", link)
    second = fetch(served.port, "GET", link)  # a link preview, then the person
    assert first.status == second.status == 200
    assert "refund order 1" in first.text and 'value="yes"' in first.text
    assert "<script" not in first.text
    check_security_headers(first)
    assert store_snapshot(store) == before
    head = fetch(served.port, "HEAD", link)
    assert head.status == 200 and head.text == ""


def test_yes_stands_and_a_later_no_does_not(serve: Serve, store: Store) -> None:
    link = ask(store)
    served = serve()
    csrf = fetch(served.port, "GET", link).csrf()
    yes = fetch(served.port, "POST", link, {"csrf": csrf, "answer": "yes"})
    assert yes.status == 200 and "Your Yes is recorded" in yes.text
    check_security_headers(yes)
    assert store.approval("a1", NOW).outcome == "yes"  # type: ignore[union-attr]
    no = fetch(served.port, "POST", link, {"csrf": csrf, "answer": "no"})
    assert no.status == 200 and "an earlier answer stands" in no.text
    assert store.approval("a1", NOW).outcome == "yes"  # type: ignore[union-attr]
    event = store.find("approval", "a1")
    assert event is not None and '"answer":"yes"' in event.payload


def test_a_post_without_the_pages_csrf_token_records_nothing(serve: Serve,
                                                             store: Store) -> None:
    link = ask(store)
    other = ask(store, "a2")
    served = serve()
    wrong = fetch(served.port, "GET", other).csrf()  # another link's token
    for form in ({"answer": "yes"}, {"answer": "yes", "csrf": ""},
                 {"answer": "yes", "csrf": wrong}, {"answer": "yes", "csrf": "x" * 43}):
        refused = fetch(served.port, "POST", link, form)
        assert refused.status == 403, form
        assert "did not come from the approval page" in refused.text
    assert store.approval("a1", NOW).outcome == "pending"  # type: ignore[union-attr]
    assert store.find("approval", "a1") is None


def test_every_token_the_inbox_did_not_sign_is_the_same_404(serve: Serve, store: Store,
                                                            open_inbox: Opener) -> None:
    from agentbox.rules.links import token

    link = ask(store)
    bob = open_inbox("bob")
    theirs = ask(bob)  # bob's inbox, the same id, user and deadline: another secret
    valid = link[len("/a/"):]
    forged = token(b"\x00" * 32, "alice", "a1", NOW + H)
    altered = valid[:-2] + ("AA" if valid[-2:] != "AA" else "BB")
    longer = token(store.link_secret(), "alice", "a1", NOW + 2 * H)  # a later deadline
    served = serve()
    csrf = fetch(served.port, "GET", link).csrf()
    bodies = set()
    for path in (f"/a/{forged}", f"/a/{altered}", theirs, f"/a/{longer}", "/a/",
                 "/a/nothing", "/a/" + "A" * 5000, f"/a/{valid}/more"):
        for method, form in (("GET", None), ("POST", {"csrf": csrf, "answer": "yes"})):
            page = fetch(served.port, method, path, form)
            assert page.status == 404, (path, method)
            bodies.add(page.text)
    store.rotate_links(NOW)
    rotated = fetch(served.port, "POST", link, {"csrf": csrf, "answer": "yes"})
    assert rotated.status == 404
    bodies.add(rotated.text)
    assert len(bodies) == 1
    assert store.find("approval", "a1") is None and bob.find("approval", "a1") is None


def test_an_action_holding_markup_shows_as_text(serve: Serve, store: Store) -> None:
    link = ask(store, action='<script>alert(1)</script><b onclick="x">bold</b>')
    served = serve()
    page = fetch(served.port, "GET", link)
    assert "<script>" not in page.text and "<b onclick" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


def test_past_its_deadline_the_link_shows_expired_and_takes_no_answer(serve: Serve,
                                                                      store: Store) -> None:
    link = ask(store, at=NOW - 2 * H, expires_in=H)
    served = serve()
    page = fetch(served.port, "GET", link)
    assert page.status == 200 and "Expired" in page.text and 'value="yes"' not in page.text
    csrf = store.link_csrf(link[len("/a/"):])
    late = fetch(served.port, "POST", link, {"csrf": csrf, "answer": "yes"})
    assert "the deadline had passed" in late.text and "Expired" in late.text
    assert store.approval("a1", NOW).outcome == "expired"  # type: ignore[union-attr]


def test_the_stylesheet_is_served(serve: Serve) -> None:
    served = serve()
    sheet = fetch(served.port, "GET", "/static/agentbox.css")
    assert sheet.status == 200 and sheet.headers["content-type"].startswith("text/css")
    assert "button" in sheet.text
