"""Console fixtures: console processes started for the test, stopped after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.serving import Served, servers


@pytest.fixture
def console(home: Path) -> Iterator[Callable[..., Served]]:
    """console(*extra_args, env=..., host=...) -> a running `agentbox console`."""
    with servers(home, "console") as start:
        yield start
