"""Serve fixtures: servers started for the test (and stopped after it), its config file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.serving import Served, servers


@pytest.fixture
def serve(home: Path) -> Iterator[Callable[..., Served]]:
    """serve(*extra_args, env=...) -> a running server; every one is stopped afterwards."""
    with servers(home) as start:
        yield start


@pytest.fixture
def config(home: Path) -> Callable[[str], None]:
    """config(toml_text): write the test's config.toml."""

    def write(text: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(text)

    return write

