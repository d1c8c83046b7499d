"""An operator acts on an inbox from the console in Chromium: replay a dead event,
resolve an uncertain dispatch, answer an approval, settle a step, and sees the inbox change."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentbox.ledger.store import Store
from support.clock import T0_2023
from support.console import dead_event, journal, uncertain_dispatch
from support.serving import Served

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

NOW = T0_2023
Shoot = Callable[["Page", str], Path]


def count(page: Page, label: str) -> str:
    """The number beside ``label`` in the inbox's counts."""
    return page.locator(".counts li", has_text=label).first.locator("b").inner_text()


def test_replay_resolve_and_answer_from_the_console(console: Callable[..., Served],
                                                    store: Store, desk: Page,
                                                    shoot: Shoot) -> None:
    dead = dead_event(store, "order-1042", NOW - 120,
                      payload='{"text": "<script>alert(1)</script> refund please"}')
    key = uncertain_dispatch(store, NOW - 60, "Your refund is on its way")
    store.request_approval("refund-1042", NOW, 3600, "Refund order 1042")
    store.ingest_many([("mail", f"m{n}", f'{{"n": {n}}}') for n in range(60)], NOW)
    served = console()
    base = f"http://127.0.0.1:{served.port}"
    desk.goto(base + "/")
    assert "alice" in desk.inner_text("table")
    shoot(desk, "console-inboxes")

    desk.get_by_role("link", name="alice").first.click()
    assert count(desk, "dead") == "1" and count(desk, "outbox uncertain") == "1"
    shoot(desk, "console-inbox")

    desk.goto(f"{base}/i/alice/events/{dead}")
    assert "<script>alert(1)</script> refund please" in desk.inner_text("pre")
    shoot(desk, "console-event")
    desk.get_by_role("button", name="Replay").click()
    assert f"Replayed event {dead}." in desk.inner_text(".notice")
    assert count(desk, "dead") == "0" and count(desk, "pending") == "61"
    assert store.event(dead).status == "pending"  # type: ignore[union-attr]

    desk.get_by_role("button", name="Resolve sent").click()
    assert f"Dispatch {key} resolved as sent." in desk.inner_text(".notice")
    assert count(desk, "outbox uncertain") == "0" and count(desk, "outbox sent") == "1"

    desk.get_by_role("button", name="Yes").click()
    assert "your answer stands" in desk.inner_text(".notice")
    assert "No approval is waiting." in desk.inner_text("main")
    shoot(desk, "console-inbox-after")
    assert store.approval("refund-1042", NOW).outcome == "yes"  # type: ignore[union-attr]

    desk.goto(f"{base}/i/alice/events?source=mail")
    assert desk.locator("tbody tr").count() == 50
    shoot(desk, "console-events")
    desk.get_by_role("link", name="Older").click()
    assert desk.locator("tbody tr").count() == 10


def test_off_loopback_the_login_form_lets_the_operator_in(console: Callable[..., Served],
                                                          store: Store, home: Path,
                                                          desk: Page, shoot: Shoot) -> None:
    dead_event(store, "order-7", NOW)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('console_token = "console-secret-0123456789"\n')
    served = console(host="0.0.0.0")
    desk.goto(f"http://127.0.0.1:{served.port}/i/alice")
    assert "order-7" not in desk.inner_text("body")
    shoot(desk, "console-login")
    desk.get_by_label("Console token").fill("not the token")
    desk.get_by_role("button", name="Sign in").click()
    assert "not the console token" in desk.inner_text(".notice")
    desk.get_by_label("Console token").fill("console-secret-0123456789")
    desk.get_by_role("button", name="Sign in").click()
    assert "alice" in desk.inner_text("table")
    desk.goto(f"http://127.0.0.1:{served.port}/i/alice")
    assert "order-7" in desk.inner_text("main")
    [cookie] = desk.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"


def test_state_and_steps_in_the_console(console: Callable[..., Served], store: Store,
                                        desk: Page, shoot: Shoot) -> None:
    done, unsettled = journal(store, NOW, note="<script>alert(1)</script> refund sent")
    served = console()
    desk.goto(f"http://127.0.0.1:{served.port}/i/alice")
    desk.get_by_role("link", name="State", exact=True).click()
    assert "<script>alert(1)</script> refund sent" in desk.inner_text("pre")
    shoot(desk, "console-state")
    desk.get_by_role("link", name="steps").first.click()
    row = desk.locator("tbody tr", has_text=unsettled)
    assert "uncertain" in row.inner_text()
    shoot(desk, "console-steps")
    row.get_by_role("button", name="Resolve not done").click()
    assert f"Step {unsettled} resolved as not done" in desk.inner_text(".notice")
    assert "failed" in desk.locator("tbody tr", has_text=unsettled).inner_text()
    assert "done" in desk.locator("tbody tr", has_text=done).inner_text()
    assert store.step(unsettled).status == "failed"  # type: ignore[union-attr]
