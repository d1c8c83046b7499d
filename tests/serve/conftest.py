"""Serve fixtures: servers started for the test (and stopped after it), its config file."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from support.serving import Served, start_server


@pytest.fixture
def serve(home: Path) -> Iterator[Callable[..., Served]]:
    """serve(*extra_args, env=...) -> a running server; every one is stopped afterwards."""
    started: list[Served] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> Served:
        served = start_server(home, *args, env=env)
        started.append(served)
        return served

    yield start
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait(timeout=30)


@pytest.fixture
def config(home: Path) -> Callable[[str], None]:
    """config(toml_text): write the test's config.toml."""

    def write(text: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(text)

    return write

