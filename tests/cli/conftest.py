"""Fixtures for the CLI tests: file-tree snapshots, direct database reads, dead events,
and a test run once per backend."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy

Snapshot = dict[str, tuple[int, str]]


def _snapshot(root: Path) -> Snapshot:
    """Every file and folder under ``root``: its mode and, for files, its sha256."""
    found: Snapshot = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode & 0o7777
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        found[str(path.relative_to(root))] = (mode, digest)
    return found


@pytest.fixture
def tree_snapshot() -> Callable[[Path], Snapshot]:
    """snapshot(root) -> {relative path: (mode, sha256 or 'dir')}; {} when root is missing."""
    return _snapshot


def _query(db: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    # A read-write connection that closes cleanly leaves no -wal/-shm behind
    # and does not change the main file.
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
def query() -> Callable[..., list[tuple[Any, ...]]]:
    """query(db, sql, params=()) -> rows, read straight from the SQLite file."""
    return _query


def _one_error(err: str) -> str:
    """The single stderr line an error leaves; fails on a traceback or extra lines."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("agentbox: error: "), err
    return lines[0]


@pytest.fixture
def one_error() -> Callable[[str], str]:
    return _one_error


def _make_dead(opener: Callable[[], Store], keys: Sequence[str], now: int,
               error: str = "handler exploded", source: str = "src") -> list[int]:
    """Store one event per key in alice's inbox and run it to death through the engine
    (one attempt)."""
    policy = Policy(max_attempts=1)
    with opener() as store:
        for key in keys:
            store.ingest(source, key, f'{{"key":"{key}"}}', now)
        generation = store.acquire("test-worker", now, 60)
        assert generation is not None
        claimed = store.claim("test-worker", generation, now, policy)
        assert claimed is not None
        ids = [e.id for e in claimed]
        assert store.fail("test-worker", generation, now, ids, error, policy)
        assert store.release("test-worker", generation, now)
        return ids


@pytest.fixture
def make_dead(open_inbox: Callable[[], Store]) -> Callable[..., list[int]]:
    """make_dead(keys, now, error=..., source=...) -> ids of alice's new dead events."""
    return lambda *args, **kwargs: _make_dead(open_inbox, *args, **kwargs)
