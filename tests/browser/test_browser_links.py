"""A person answers an approval from its link on a phone-sized Chromium, no JavaScript."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agentbox.ledger.store import Store
from support.clock import T0_2023
from support.serving import Served

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

H = 3_600
NOW = T0_2023
Shoot = Callable[["Page", str], Path]


def link(served: Served, store: Store, approval_id: str, at: int, expires_in: int) -> str:
    store.request_approval(approval_id, at, expires_in, "Refund order 1042 (EUR 89.00) to "
                           "the customer's card")
    approval = store.approval(approval_id, at)
    assert approval is not None
    return f"http://127.0.0.1:{served.port}/a/{store.approval_token('alice', approval)}"


def test_open_the_link_press_yes_see_the_outcome(serve: Callable[..., Served], store: Store,
                                                 phone: Page, shoot: Shoot) -> None:
    served = serve()
    phone.goto(link(served, store, "refund-1042", NOW, H))
    assert "Refund order 1042" in phone.inner_text("main")
    yes = phone.get_by_role("button", name="Yes")
    box = yes.bounding_box()
    assert box is not None and box["height"] >= 48 and box["x"] + box["width"] <= 360
    card = phone.locator(".card").bounding_box()
    assert card is not None and card["x"] >= 0 and card["x"] + card["width"] <= 360
    shoot(phone, "link-pending")
    yes.click()
    phone.wait_for_selector(".outcome")
    assert phone.inner_text(".outcome") == "Yes"
    assert "Your Yes is recorded" in phone.inner_text("main")
    shoot(phone, "link-answered-yes")
    assert store.approval("refund-1042", NOW).outcome == "yes"  # type: ignore[union-attr]


def test_the_same_link_after_the_deadline_shows_expired(serve: Callable[..., Served],
                                                        store: Store, phone: Page,
                                                        shoot: Shoot) -> None:
    served = serve()
    phone.goto(link(served, store, "refund-7", NOW - 2 * H, H))  # expired an hour ago
    assert phone.inner_text(".outcome") == "Expired"
    assert phone.get_by_role("button", name="Yes").count() == 0
    shoot(phone, "link-expired")
    phone.goto(f"http://127.0.0.1:{served.port}/a/forged.{'A' * 43}")
    assert "not valid" in phone.inner_text("main")
    shoot(phone, "link-not-valid")
