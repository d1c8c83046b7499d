"""A real HTTP client for agentbox's HTML pages (approval links, the console)."""

from __future__ import annotations

import http.client
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_CSRF = re.compile(r'name="csrf" value="([^"]*)"')


@dataclass
class Page:
    status: int
    text: str
    headers: dict[str, str]

    def csrf(self) -> str:
        """The CSRF token of the page's first form."""
        found = _CSRF.search(self.text)
        assert found, f"no form with a CSRF token in: {self.text[:500]}"
        return found.group(1)


def fetch(port: int, method: str, path: str, form: Mapping[str, str] | None = None,
          headers: Mapping[str, str] | None = None, host: str = "127.0.0.1") -> Page:
    """One request on a fresh connection; ``form`` is sent url-encoded."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    sent = dict(headers or {})
    body = None
    if form is not None:
        body = urlencode(form)
        sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return Page(response.status, response.read().decode("utf-8"),
                    {k.lower(): v for k, v in response.getheaders()})
    finally:
        conn.close()


def check_security_headers(page: Page) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert page.headers.get(name) == value, (name, page.headers)
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src" not in policy
    assert "frame-ancestors 'none'" in policy
