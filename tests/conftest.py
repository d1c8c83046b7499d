"""Every folder's fixtures come from support.fixtures; PostgreSQL skips fold into one line."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from support.postgres import SKIPPED, SKIPPED_AT

pytest_plugins = ["support.fixtures"]

if importlib.util.find_spec("psycopg") is None:
    # Those tests need the driver itself; the contract suite's PostgreSQL half
    # still reports (skips, or under AGENTBOX_REQUIRE_PG=1 fails) why it did not run.
    collect_ignore = ["postgres"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Every PostgreSQL skip reported at one place, so the summary folds them into one line."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and SKIPPED in str(longrepr[2]):
        report.longrepr = (SKIPPED_AT, 1, longrepr[2])
    return report
