"""The ``backend`` fixture: one fresh, empty Store per test, for every backend.

The suite in this folder speaks to :class:`agentbox.store.Store` only:
no SQL, no file, no module of the SQLite engine. To plug in a new backend
(PostgreSQL, say), write a factory that returns an empty store of that kind
and add it to ``BACKENDS``::

    def postgres(tmp_path: Path) -> Store:
        dsn = os.environ.get("AGENTBOX_TEST_PG")
        if not dsn:
            pytest.skip("set AGENTBOX_TEST_PG to test the PostgreSQL backend")
        return PostgresStore.fresh(dsn)   # a new schema per test

    BACKENDS = {"sqlite": sqlite, "postgres": postgres}

Every test then runs once per backend, with the same expectations. A factory
called twice with the same ``tmp_path`` must open the same inbox (the ``twin``
fixture is another process's view of it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentbox.backends.sqlite.store import SqliteStore
from agentbox.store import Store


def sqlite(tmp_path: Path) -> Store:
    return SqliteStore(tmp_path / "contract.sqlite3")


BACKENDS: dict[str, Callable[[Path], Store]] = {"sqlite": sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store = BACKENDS[request.param](tmp_path)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def other_backend(request: pytest.FixtureRequest, tmp_path: Path,
                  backend: Store) -> Iterator[Store]:
    """A second, separate store of the same kind as ``backend``."""
    kind = request.node.callspec.params["backend"]
    store = BACKENDS[kind](tmp_path / "other")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def twin(request: pytest.FixtureRequest, tmp_path: Path, backend: Store) -> Iterator[Store]:
    """A second connection to ``backend``'s own inbox, as another process would open it."""
    kind = request.node.callspec.params["backend"]
    store = BACKENDS[kind](tmp_path)
    try:
        yield store
    finally:
        store.close()
