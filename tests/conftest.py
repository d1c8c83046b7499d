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


# marker -> the one backend a test so marked runs on
ONLY = {"sqlite_file": "sqlite", "postgres_only": "postgres", "backend_free": "sqlite"}
# Fixtures that hand a test the inbox file itself: a test asking for one is a
# SQLite-file test whether marked or not.
FILE_FIXTURES = {"inbox_path", "query"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked for one backend keeps that backend's run only."""
    dropped = []
    for item in items:
        backend = getattr(item, "callspec", None) and item.callspec.params.get("backend_name")
        wanted = {ONLY[m.name] for m in item.iter_markers() if m.name in ONLY}
        if FILE_FIXTURES & set(getattr(item, "fixturenames", ())):
            wanted.add("sqlite")
        if backend and wanted and backend not in wanted:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Every PostgreSQL skip reported at one place, so the summary folds them into one line."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and SKIPPED in str(longrepr[2]):
        report.longrepr = (SKIPPED_AT, 1, longrepr[2])
    return report


@pytest.fixture(autouse=True)
def system_files_untouched() -> Iterator[None]:
    """No test leaves the machine's /dev/null with other permissions than it found: a
    root test run handing agentbox a device, with a bug that took it for an empty file
    of its own, would make it private, and break every other user's programs."""
    import os

    before = os.stat(os.devnull).st_mode
    yield
    after = os.stat(os.devnull).st_mode
    if after != before:
        os.chmod(os.devnull, before)
        pytest.fail(f"{os.devnull} went from {before:o} to {after:o} (put back)")
