"""Store contract: a backup that opens as an inbox, and the backend's health checks."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agentbox.errors import UsageError
from agentbox.ledger.store import Store
from agentbox.location import open_store
from agentbox.rules.answer import Answer, Usage
from agentbox.upkeep import backup
from support.clock import T0
from support.store import run, say


def test_a_backup_opens_as_the_same_inbox(backend: Store, tmp_path: Path) -> None:
    for n in range(5):
        backend.ingest("hook", str(n), f'{{"n":{n}}}', T0 + n)
    run(backend, "agent", T0 + 10, Answer(usage=Usage(tokens=40, cost=0.5)))
    say(backend, T0 + 11, "hello")
    backend.ingest("hook", "late", "{}", T0 + 12)
    dest = tmp_path / "copy.sqlite3"
    size = backup(backend, str(dest))
    assert size == dest.stat().st_size > 0
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    copy = open_store(str(dest), "alice", create=False)
    try:
        assert copy.events(limit=100) == backend.events(limit=100)
        assert copy.status() == backend.status()
        assert copy.outbox() == backend.outbox()
        assert copy.instance_id() == backend.instance_id()
        assert copy.usage() == backend.usage()
        whole_day = (T0 - T0 % 86_400, T0 - T0 % 86_400 + 86_400)  # the quarters' totals
        assert copy.spent(whole_day) == backend.spent(whole_day) == (40, 0.5)
        assert [c.name for c in copy.checks() if not c.ok] == []
        first = backend.events(limit=1)[0].id
        assert copy.story(first) == backend.story(first)
    finally:
        copy.close()


def test_a_backup_never_overwrites_unless_asked(backend: Store, tmp_path: Path) -> None:
    backend.ingest("hook", "1", "{}", T0)
    dest = tmp_path / "copy.sqlite3"
    dest.write_bytes(b"precious")
    with pytest.raises(UsageError):
        backup(backend, str(dest))
    assert dest.read_bytes() == b"precious"
    backup(backend, str(dest), replace=True)
    copy = open_store(str(dest), "alice", create=False)
    try:
        assert copy.find("hook", "1") is not None
    finally:
        copy.close()
    # no temporary file is left (an inbox file's lock beside it is not one)
    assert [p.name for p in tmp_path.iterdir()
            if p.name.startswith(".") and not p.name.endswith(".lock")] == []


def test_a_healthy_store_passes_every_check(backend: Store) -> None:
    backend.ingest("hook", "1", "{}", T0)
    checks = backend.checks()
    assert {"integrity", "schema"} <= {c.name for c in checks}
    assert all(c.ok for c in checks), checks
    assert all(c.detail for c in checks)
