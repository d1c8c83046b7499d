"""One Chromium per module, driven by Playwright: Debian's /usr/bin/chromium, no download.

Screenshots of every page a test visits go to $AGENTBOX_SCREENSHOTS (CI keeps
it as an artefact), else to a temporary folder; they are never committed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.serving import Served, servers

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
PHONE = {"width": 360, "height": 740}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start.
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("AGENTBOX_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def shoot(screenshots: Path, backend_name: str) -> Callable[[Page, str], Path]:
    """shoot(page, name): a full-page PNG of what the browser shows now."""

    def take(page: Page, name: str) -> Path:
        path = screenshots / f"{name}-{backend_name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    """A page the size of a small phone's screen, JavaScript off: nothing needs it."""
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    yield context.new_page()
    context.close()


@pytest.fixture
def desk(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 800},
                                  java_script_enabled=False)
    yield context.new_page()
    context.close()


@pytest.fixture
def serve(home: Path) -> Iterator[Callable[..., Served]]:
    with servers(home) as start:
        yield start


@pytest.fixture
def console(home: Path) -> Iterator[Callable[..., Served]]:
    with servers(home, "console") as start:
        yield start
