"""Server-rendered pages: pages warmed at start-up are never loaded again per request."""

from __future__ import annotations

import pytest

from agentbox import pages

pytestmark = pytest.mark.backend_free


def test_a_warmed_page_renders_without_loading_its_template_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = pages._templates()
    env.cache.clear()  # type: ignore[union-attr]  # as a server that just started
    pages.warm.cache_clear()
    pages.warm()

    def loaded_again(*args: object) -> None:
        raise AssertionError("a template was loaded while answering")

    monkeypatch.setattr(env.loader, "get_source", loaded_again)
    shown = pages.page("message.html", {"heading": "Busy", "text": "Try again."}, 503)
    assert shown.status == 503 and b"Try again." in shown.body  # and base.html it extends
    env.cache.clear()  # type: ignore[union-attr]
    with pytest.raises(AssertionError, match="loaded while answering"):
        pages.page("message.html", {"heading": "Busy", "text": "Try again."})  # cold
