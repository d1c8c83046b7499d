"""The ``backend`` fixture: one fresh, empty Store per test, for every backend.

The suite in this folder speaks to :class:`agentbox.location.Store` only: no
SQL, no file, no module of a backend. Each entry of ``BACKENDS`` makes a
fresh place for inboxes (a folder of SQLite files; a new PostgreSQL schema,
dropped afterwards) and yields a function that opens the inbox of a user
there: opening the same user twice gives two connections to one inbox, as
two processes would have. Every test runs once per backend, with the same
expectations; a backend whose server is missing is skipped (see
tests/support/postgres.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from agentbox.ledger.store import Store
from agentbox.location import open_store
from support.postgres import fresh_schema

Opener = Callable[[str], Store]  # a user's name -> that user's inbox


@contextmanager
def sqlite(tmp_path: Path) -> Iterator[Opener]:
    """One file per user in the test's folder."""
    yield lambda user: open_store(tmp_path / f"{user}.sqlite3", user)


@contextmanager
def postgres(tmp_path: Path) -> Iterator[Opener]:
    """Every user's inbox in one new schema of the test server."""
    with fresh_schema() as url:
        yield lambda user: open_store(url, user)


BACKENDS: dict[str, Callable[[Path], AbstractContextManager[Opener]]] = {
    "sqlite": sqlite, "postgres": postgres}


@pytest.fixture(params=sorted(BACKENDS))
def open_inbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    with BACKENDS[request.param](tmp_path) as opener:
        yield opener


@pytest.fixture
def backend(open_inbox: Opener) -> Iterator[Store]:
    with open_inbox("alice") as store:
        yield store


@pytest.fixture
def other_backend(open_inbox: Opener, backend: Store) -> Iterator[Store]:
    """Another user's inbox beside ``backend`` (on PostgreSQL, in the same schema)."""
    with open_inbox("bob") as store:
        yield store


@pytest.fixture
def twin(open_inbox: Opener, backend: Store) -> Iterator[Store]:
    """A second connection to ``backend``'s own inbox, as another process would open it."""
    with open_inbox("alice") as store:
        yield store
