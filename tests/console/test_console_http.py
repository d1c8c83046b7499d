"""`agentbox console` over loopback: a real client against a real process, on both
backends. Pages read through the store and change nothing; actions need the console's
CSRF token; markup in a payload is text; off loopback every page wants the token."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbox.ledger.store import Store
from support.clock import T0_2023
from support.console import dead_event, journal, uncertain_dispatch
from support.pages import check_security_headers, fetch
from support.processes import proc_env
from support.serving import Served
from support.store import store_snapshot

pytestmark = pytest.mark.slow

Console = Callable[..., Served]
NOW = T0_2023
TOKEN = "console-secret-0123456789"


def test_the_pages_show_the_inbox_and_reading_them_changes_nothing(console: Console,
                                                                   store: Store) -> None:
    dead = dead_event(store, "k-dead", NOW - 60)
    key = uncertain_dispatch(store, NOW - 30)
    store.request_approval("a1", NOW, 3600, "ship the order")
    served = console()
    before = store_snapshot(store, [dead])
    front = fetch(served.port, "GET", "/")
    assert front.status == 200 and 'href="/i/alice"' in front.text
    check_security_headers(front)
    inbox = fetch(served.port, "GET", "/i/alice")
    assert inbox.status == 200
    for seen in ("k-dead", "Replay", key, "Resolve sent", "ship the order", "expire:a1"):
        assert seen in inbox.text, seen
    event = fetch(served.port, "GET", f"/i/alice/events/{dead}")
    assert event.status == 200 and "boom" in event.text and "dead" in event.text
    for path in ("/", "/i/alice", f"/i/alice/events/{dead}", "/i/alice/events"):
        fetch(served.port, "GET", path)
    assert store_snapshot(store, [dead]) == before
    assert fetch(served.port, "GET", "/i/nobody").status == 404
    assert fetch(served.port, "GET", "/i/alice/events/999").status == 404


def test_events_page_by_id_newest_first_and_filter(console: Console, store: Store) -> None:
    store.ingest_many([("chat", f"c{n}", "{}") for n in range(70)]
                      + [("mail", f"m{n}", "{}") for n in range(5)], NOW)
    served = console()
    first = fetch(served.port, "GET", "/i/alice/events")
    ids = [int(i) for i in re.findall(r'/i/alice/events/(\d+)"', first.text)]
    assert ids == list(range(75, 25, -1))  # the newest 50
    older = re.search(r'href="(/i/alice/events\?[^"]*before=26[^"]*)"', first.text)
    assert older, first.text[-800:]
    second = fetch(served.port, "GET", older.group(1).replace("&amp;", "&"))
    assert [int(i) for i in re.findall(r'/i/alice/events/(\d+)"', second.text)] == list(
        range(25, 0, -1))
    assert "Older" not in second.text.split('class="pager"')[1]
    mail = fetch(served.port, "GET", "/i/alice/events?source=mail&state=pending")
    assert [int(i) for i in re.findall(r'/i/alice/events/(\d+)"', mail.text)] == list(
        range(75, 70, -1))
    assert fetch(served.port, "GET", "/i/alice/events?state=nonsense").status == 400
    assert fetch(served.port, "GET", "/i/alice/events?before=x").status == 400


def test_a_payload_holding_markup_shows_as_text(console: Console, store: Store) -> None:
    evil = '{"text": "<script>alert(1)</script>", "k": "\\"><img src=x onerror=alert(2)>"}'
    dead = dead_event(store, "<script>alert(3)</script>", NOW, payload=evil)
    served = console()
    for path in (f"/i/alice/events/{dead}", "/i/alice", "/i/alice/events"):
        page = fetch(served.port, "GET", path)
        assert page.status == 200
        assert "<script>" not in page.text and "<img" not in page.text, path
        assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page.text, path


def test_replay_and_resolve_need_the_csrf_token(console: Console, store: Store) -> None:
    dead = dead_event(store, "k-dead", NOW)
    key = uncertain_dispatch(store, NOW)
    served = console()
    csrf = fetch(served.port, "GET", "/i/alice").csrf()
    before = store_snapshot(store, [dead])
    for form in ({"id": str(dead)}, {"id": str(dead), "csrf": "wrong"},
                 {"id": str(dead), "csrf": ""}):
        assert fetch(served.port, "POST", "/i/alice/replay", form).status == 403
    assert fetch(served.port, "POST", "/i/alice/replay", {"id": str(dead), "csrf": csrf},
                 {"Origin": "http://evil.example"}).status == 403
    assert fetch(served.port, "GET", "/i/alice/replay").status == 405
    assert store_snapshot(store, [dead]) == before
    replayed = fetch(served.port, "POST", "/i/alice/replay", {"id": str(dead), "csrf": csrf})
    assert replayed.status == 303 and replayed.headers["location"].startswith("/i/alice?")
    assert store.event(dead).status == "pending"  # type: ignore[union-attr]
    said = fetch(served.port, "GET", replayed.headers["location"])
    assert f"Replayed event {dead}." in said.text
    resolved = fetch(served.port, "POST", "/i/alice/resolve",
                     {"key": key, "verdict": "sent", "csrf": csrf})
    assert resolved.status == 303
    assert [m.state for m in store.outbox(("sent", "uncertain"))] == ["sent"]
    again = fetch(served.port, "POST", "/i/alice/resolve",
                  {"key": key, "verdict": "sent", "csrf": csrf})
    assert "done=not-uncertain" in again.headers["location"]


def test_yes_in_the_console_answers_as_approve_answer(console: Console, store: Store) -> None:
    store.request_approval("a1", NOW, 3600, "ship the order")
    served = console()
    csrf = fetch(served.port, "GET", "/i/alice").csrf()
    answered = fetch(served.port, "POST", "/i/alice/answer",
                     {"id": "a1", "answer": "yes", "csrf": csrf})
    assert answered.status == 303
    assert store.approval("a1", NOW).outcome == "yes"  # type: ignore[union-attr]
    late = fetch(served.port, "POST", "/i/alice/answer",
                 {"id": "a1", "answer": "no", "csrf": csrf})
    assert "not-answered" in late.headers["location"]
    assert store.approval("a1", NOW).outcome == "yes"  # type: ignore[union-attr]


def test_on_loopback_a_foreign_host_name_gets_nothing(console: Console, store: Store) -> None:
    store.ingest("chat", "c1", "{}", NOW)
    served = console()
    for path in ("/", "/i/alice"):
        assert fetch(served.port, "GET", path, headers={"Host": "evil.example"}).status == 403
    assert fetch(served.port, "GET", "/", headers={"Host": f"localhost:{served.port}"}
                 ).status == 200


@pytest.mark.backend_free
def test_off_loopback_without_a_token_it_refuses_to_start(home: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "agentbox", "console", "--listen",
                           "0.0.0.0:0"], capture_output=True, text=True, timeout=60,
                          env=proc_env(home))
    assert done.returncode == 2
    assert "console_token" in done.stderr


def test_off_loopback_every_page_wants_the_token(console: Console, store: Store,
                                                 home: Path) -> None:
    dead = dead_event(store, "k-dead", NOW)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'console_token = "{TOKEN}"\n')
    served = console(host="0.0.0.0")
    for method, path in (("GET", "/"), ("GET", "/i/alice"), ("GET", "/i/alice/events"),
                         ("GET", f"/i/alice/events/{dead}"), ("POST", "/i/alice/replay"),
                         ("GET", "/nothing")):
        page = fetch(served.port, method, path, {"id": str(dead)} if method == "POST" else None)
        assert page.status == 401, (method, path)
        assert "k-dead" not in page.text and "Console token" in page.text
        wrong = fetch(served.port, method, path, headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
    assert store.event(dead).status == "dead"  # type: ignore[union-attr]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert "k-dead" in fetch(served.port, "GET", "/i/alice", headers=bearer).text
    refused = fetch(served.port, "POST", "/login", {"token": "not it"})
    assert refused.status == 401 and "set-cookie" not in refused.headers
    login = fetch(served.port, "POST", "/login", {"token": TOKEN})
    assert login.status == 303
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    assert "k-dead" in fetch(served.port, "GET", "/i/alice", headers=jar).text


def test_state_and_steps_pages_show_the_journal_and_resolve_a_step(console: Console,
                                                                   store: Store) -> None:
    done, unsettled = journal(store, NOW, note="<script>alert(4)</script>")
    served = console()
    state = fetch(served.port, "GET", "/i/alice/state")
    assert state.status == 200 and "Version <b>1</b>" in state.text and "operator" in state.text
    assert "<script>" not in state.text and "&lt;script&gt;alert(4)" in state.text
    steps = fetch(served.port, "GET", "/i/alice/steps")
    assert steps.status == 200 and done in steps.text and "message-id 77" in steps.text
    assert steps.text.count('action="/i/alice/resolve-step"') == 1  # the unsettled one only
    assert fetch(served.port, "GET", "/i/alice/steps?state=done").text.count("<code>") == 1
    assert fetch(served.port, "GET", "/i/alice/steps?state=nonsense").status == 400
    csrf = steps.csrf()
    form = {"key": unsettled, "verdict": "not-done"}
    assert fetch(served.port, "POST", "/i/alice/resolve-step", form).status == 403
    assert store.step(unsettled).status == "uncertain"  # type: ignore[union-attr]
    resolved = fetch(served.port, "POST", "/i/alice/resolve-step", {**form, "csrf": csrf})
    assert resolved.status == 303 and resolved.headers["location"].startswith("/i/alice/steps?")
    assert store.step(unsettled).status == "failed"  # type: ignore[union-attr]
    assert "resolved as not done" in fetch(served.port, "GET", resolved.headers["location"]).text
    again = fetch(served.port, "POST", "/i/alice/resolve-step",
                  {"key": done, "verdict": "not-done", "csrf": csrf})
    assert "done=step-unchanged" in again.headers["location"]
    assert store.step(done).status == "done"  # type: ignore[union-attr]
