"""A long-running command leaves what it made while starting out of the collector's full
passes, and still collects what its loop makes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from agentbox.cli import listening


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed() -> Iterator[None]:
    """The test process's objects back in the collector's generations afterwards."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_start_up_is_frozen_after_its_garbage_is_collected(thawed: None) -> None:
    before = Node()
    gone = weakref.ref(before)
    del before  # garbage of start-up: collected, not frozen for the process's life
    listening.long_lived()
    assert gone() is None
    assert gc.get_freeze_count() > 1000  # the modules and everything they hold


def test_what_the_loop_makes_is_still_collected(thawed: None) -> None:
    listening.long_lived()
    later = Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None
