"""`restore BACKUP [--force]`: the inbox replaced by a backup, losing nothing acknowledged,
reusing no id or key, and ready to run at once."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import open_store
from support.clock import T0, T0_2023
from support.fixtures import Cli
from support.processes import wait_for
from support.serving import Served, start_server

pytestmark = pytest.mark.sqlite_file  # the inbox file itself, swapped


def backup_after(cli: Cli, dest: Path, *keys: str) -> None:
    for key in keys:
        assert cli("ingest", "chat", key, now=T0).code == 0
    assert cli("backup", str(dest), now=T0).code == 0


def keys_handled(cli: Cli, handler: list[str], record: Path) -> dict[str, str]:
    """Run once; the idempotency key the handler was given for each source_id."""
    result = cli("run", "--", *handler, "--record", str(record), now=T0 + 10)
    assert result.code == 0, result.err
    keys: dict[str, str] = {}
    for line in record.read_text().splitlines():
        for event in json.loads(line)["batch"]["events"]:
            keys[event["source_id"]] = event["idempotency_key"]
    return keys


def test_restore_refuses_events_the_backup_lacks_unless_forced_and_keeps_the_file(
        cli: Cli, inbox_path: Path, tmp_path: Path) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    for key in ("b", "c"):
        assert cli("ingest", "chat", key, now=T0).code == 0
    refused = cli("restore", str(backup), now=T0 + 1)
    assert refused.code == 2
    assert "holds 2 event(s) the backup does not have" in refused.err
    assert [p.name for p in inbox_path.parent.iterdir() if ".replaced-" in p.name] == []

    done = cli("restore", str(backup), "--force", "--json", now=T0 + 1)
    assert done.code == 0, done.err
    doc = json.loads(done.out)
    kept = Path(doc["replaced"])
    assert kept.parent == inbox_path.parent and kept.name.startswith("alice.sqlite3.replaced-")
    assert (doc["events"], doc["events_not_in_backup"], doc["next_id"]) == (1, 2, 4)
    listed = json.loads(cli("events", "--json", now=T0 + 1).out)
    assert [e["source_id"] for e in listed] == ["a"]
    old = json.loads(cli("--db", str(kept), "events", "--json", now=T0 + 1).out)
    assert [e["source_id"] for e in old] == ["a", "b", "c"]
    human = cli("restore", str(backup), now=T0 + 2)
    assert human.code == 0 and "the replaced inbox is kept as" in human.out


def test_ids_and_keys_after_a_restore_are_never_given_out_twice(
        cli: Cli, tmp_path: Path, handler: list[str]) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    assert cli("ingest", "chat", "b", now=T0).code == 0
    before = keys_handled(cli, handler, tmp_path / "before.jsonl")
    assert cli("restore", str(backup), "--force", now=T0 + 5).code == 0
    stored = json.loads(cli("ingest", "chat", "c", "--json", now=T0 + 6).out)
    assert stored["id"] == 3  # above the replaced file's highest, not the backup's
    after = keys_handled(cli, handler, tmp_path / "after.jsonl")
    assert after["a"] == before["a"]  # a restored event keeps its key
    assert after["c"] not in before.values()
    assert not after["c"].startswith(before["a"].split("-event-")[0] + "-event-")


def test_a_backup_restored_where_the_replaced_file_is_gone_still_takes_new_keys(
        cli: Cli, inbox_path: Path, tmp_path: Path, handler: list[str]) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    assert cli("ingest", "chat", "b", now=T0).code == 0
    lost = keys_handled(cli, handler, tmp_path / "lost.jsonl")
    for path in inbox_path.parent.iterdir():
        path.unlink()  # the machine is gone: only the backup is left
    assert cli("restore", str(backup), now=T0 + 5).code == 0
    assert cli("ingest", "chat", "b2", now=T0 + 6).code == 0
    again = keys_handled(cli, handler, tmp_path / "again.jsonl")
    assert again["b2"] not in lost.values()  # id 2 again, but of a new epoch


def test_a_restored_always_on_inbox_passes_doctor_and_runs_at_once(
        cli: Cli, inbox_path: Path, tmp_path: Path, handler: list[str]) -> None:
    assert cli("ingest", "chat", "a", now=T0).code == 0
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = f"{socket.gethostname()}:{gone.pid}:x"
    with open_store(inbox_path, "alice") as store:  # a worker that died holding its claim
        generation = store.acquire(dead, T0, 3600)
        assert generation is not None and store.claim(dead, generation, T0, _policy())
    backup = tmp_path / "b.sqlite3"
    assert cli("backup", str(backup), now=T0).code == 0
    shutil.copy(backup, tmp_path / "other.sqlite3")
    assert cli("--db", str(tmp_path / "other.sqlite3"), "doctor", now=T0 + 1).code == 1
    assert cli("restore", str(backup), now=T0 + 1).code == 0
    assert cli("doctor", now=T0 + 1).code == 0, cli("doctor", now=T0 + 1).out
    ran = cli("run", "--", *handler, now=T0 + 2)
    assert ran.code == 0, ran.err
    status = json.loads(cli("status", "--json", now=T0 + 2).out)
    assert status["events"]["done"] == 1
    assert status["lease"]["generation"] > generation  # the fence goes on above it


def _policy() -> Any:
    from agentbox.rules.policy import Policy

    return Policy(lease_ttl=3600)


def test_a_live_lease_or_an_open_inbox_refuses_the_restore(
        cli: Cli, inbox_path: Path, tmp_path: Path) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    holder = f"{socket.gethostname()}:{os.getpid()}:me"
    with open_store(inbox_path, "alice") as store:
        assert store.acquire(holder, T0, 3600) is not None
        busy = cli("restore", str(backup), now=T0 + 1)
        assert busy.code == 75 and "works on this inbox" in busy.err
    lease = cli("restore", str(backup), now=T0 + 1)
    assert lease.code == 75 and f"the lease is held by {holder}" in lease.err
    assert cli("restore", str(backup), now=T0 + 3601).code == 0


def test_a_backup_that_is_no_agentbox_inbox_is_refused_before_anything_changes(
        cli: Cli, inbox_path: Path, tmp_path: Path) -> None:
    assert cli("ingest", "chat", "a", now=T0).code == 0
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database at all" * 100)
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    before = inbox_path.read_bytes()
    for bad in (junk, foreign):
        result = cli("restore", str(bad), "--force", now=T0)
        assert result.code == 65, result.err
    assert cli("restore", str(tmp_path / "missing"), now=T0).code == 2
    assert inbox_path.read_bytes() == before
    assert not [p.name for p in inbox_path.parent.iterdir()
                if ".restore-" in p.name or ".replaced-" in p.name]


def replace_by_hand(backup: Path, inbox: Path) -> None:
    """What an operator did before `restore`: the file moved aside, its log removed, the
    backup copied in (whole: under another name first)."""
    os.replace(inbox, inbox.with_name(inbox.name + ".aside"))
    for side in ("-wal", "-shm"):
        Path(f"{inbox}{side}").unlink(missing_ok=True)
    copy = inbox.with_name(".copy")
    shutil.copy(backup, copy)
    os.replace(copy, inbox)


def _post_until(served: Served, stop: threading.Event, acked: list[int]) -> None:
    n = 0
    while not stop.is_set():
        reply = served.post("hook", json.dumps({"n": n}), key=f"k-{n}")
        if reply.status == 200:
            acked.append(int(reply.doc["id"]))
        n += 1


def test_restore_under_a_running_serve_loses_nothing_acknowledged(
        cli: Cli, home: Path, inbox_path: Path, tmp_path: Path) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    served = start_server(home)
    stop, acked = threading.Event(), []
    poster = threading.Thread(target=_post_until, args=(served, stop, acked))
    poster.start()
    try:
        wait_for(lambda: len(acked) >= 5, "some deliveries")
        refused = cli("restore", str(backup), "--force", now=T0_2023)
        assert refused.code == 75 and "works on this inbox" in refused.err
        wait_for(lambda: len(acked) >= 10, "more deliveries")
    finally:
        stop.set()
        poster.join(timeout=60)
    assert served.stop() == 0
    with open_store(inbox_path, "alice") as store:
        assert all(store.event(i) is not None for i in acked)

    # A file put in place by hand under a running serve: it stores into that one.
    served = start_server(home)
    try:
        assert served.post("hook", "{}", key="before").status == 200
        replace_by_hand(backup, inbox_path)
        reply = served.post("hook", "{}", key="after")
        assert reply.status == 200, reply.doc
    finally:
        served.stop()
    with open_store(inbox_path, "alice") as store:
        assert store.find("hook", "after") is not None
        assert store.find("hook", "before") is None


def test_a_watcher_follows_an_inbox_replaced_under_it(
        cli: Cli, inbox_path: Path, tmp_path: Path, handler: list[str],
        start_watcher: Callable[..., Any]) -> None:
    backup = tmp_path / "b.sqlite3"
    backup_after(cli, backup, "a")
    record = tmp_path / "watched.jsonl"
    watcher = start_watcher("run", "--watch", "--", *handler, "--record", str(record))
    wait_for(lambda: record.exists() and "\"a\"" in record.read_text(), "the first run")
    with sqlite3.connect(backup) as conn:  # the backup's own event is handled already
        conn.execute("UPDATE events SET status = 'done'")
    conn.close()
    replace_by_hand(backup, inbox_path)
    assert cli("ingest", "chat", "new", now=T0_2023).code == 0
    wait_for(lambda: "\"new\"" in record.read_text(), "the watcher to see the new event")
    watcher.stop()


def test_a_backup_from_an_older_agentbox_is_upgraded_and_its_payloads_still_dedupe(
        cli: Cli, inbox_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.backends.sqlite import db

    old = tmp_path / "v8.sqlite3"
    with monkeypatch.context() as v8:
        v8.setattr(db, "SCHEMA_VERSION", 8)
        db.connect(old).close()
    with sqlite3.connect(old) as conn:  # as 0.2 stored a float: Python's spelling
        conn.execute("""INSERT INTO events (source, source_id, payload, created_at, updated_at)
                        VALUES ('hook', 'k', '{"n":1.0}', ?, ?)""", (T0, T0))
    conn.close()
    assert cli("ingest", "chat", "a", now=T0).code == 0
    assert cli("restore", str(old), "--force", now=T0 + 1).code == 0
    assert sqlite3.connect(inbox_path).execute("PRAGMA user_version").fetchone()[0] > 8
    again = cli("ingest", "hook", "k", "--payload", '{"n": 1.0}', "--json", now=T0 + 2)
    assert json.loads(again.out)["outcome"] == "duplicate"
    assert cli("prune", now=T0 + 3).code == 0  # rewrites the old spelling
    same = cli("ingest", "hook", "k", "--payload", '{"n": 1}', "--json", now=T0 + 4)
    assert json.loads(same.out)["outcome"] == "duplicate"
