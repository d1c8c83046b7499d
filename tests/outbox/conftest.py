"""Outbox fixtures: messages put in through a finished run, and alice's inbox open.

The recording sender (``sender``) is every folder's: see support/sending.py.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from agentbox import paths
from agentbox.ledger.store import Store
from support.store import say

Queue = Callable[..., None]


@pytest.fixture
def queue(store: Store) -> Queue:
    """queue(now, "body", ..., urgent=False) into the engine-level ``store``."""
    return partial(say, store)


@pytest.fixture
def inbox_store(home: Path, open_inbox: Callable[..., Store]) -> Store:
    """Alice's inbox, open: the one the CLI uses for her (its folder made if need be)."""
    paths.private_dir(paths.inbox_path("alice").parent)
    return open_inbox()


@pytest.fixture
def cli_queue(inbox_store: Store) -> Queue:
    """queue(now, "body", ..., urgent=False) into alice's inbox."""
    return partial(say, inbox_store)
