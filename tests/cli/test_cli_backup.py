"""`backup DEST`: a consistent copy, taken while writers keep working, that restores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli
from support.processes import proc_env, wait_for
from support.sqlite import sqlite_store

# One writer process: ingests its own keys one durable transaction at a time and logs
# each key once its ingest has returned (acked), until it is told to stop.
WRITER = r"""
import signal, sys
from agentbox.location import open_store
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
db, name, log = sys.argv[1:4]
store = open_store(db, "")
with open(log, "a", buffering=1) as out:
    n = 0
    while not stop:
        result = store.ingest("load", f"{name}-{n}", '{"n":%d}' % n, 1000000 + n)
        assert result.outcome == "stored", result
        out.write(f"{name}-{n}\n")
        n += 1
store.close()
"""


def test_backup_writes_a_private_copy_and_refuses_to_overwrite(cli: Cli, inbox_path: Path,
                                                               tmp_path: Path,
                                                               one_error: Any) -> None:
    for n in range(3):
        assert cli("ingest", "s", str(n), now=T0).code == 0
    dest = tmp_path / "copy.sqlite3"
    result = cli("backup", str(dest), "--json", now=T0)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc == {"db": str(inbox_path), "backup": str(dest), "bytes": dest.stat().st_size}
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    copied = json.loads(cli("--db", str(dest), "events", "--json", now=T0).out)
    assert copied == json.loads(cli("events", "--json", now=T0).out)

    assert cli("ingest", "s", "3", now=T0).code == 0
    again = cli("backup", str(dest), now=T0)
    assert again.code == 2
    assert one_error(again.err) == f"agentbox: error: {dest} exists; pass --force to replace it"
    assert cli("backup", str(dest), "--force", now=T0).code == 0
    assert len(json.loads(cli("--db", str(dest), "events", "--json", now=T0).out)) == 4
    assert cli("backup", str(inbox_path), "--force", now=T0).code == 2  # never onto itself
    missing = cli("backup", str(tmp_path / "no" / "copy.sqlite3"), now=T0)
    assert missing.code == 1 and "cannot write the backup" in one_error(missing.err)


def test_backup_compacts_and_hands_space_back_on_an_old_style_file(cli: Cli, inbox_path: Path,
                                                                   tmp_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    with sqlite_store(inbox_path) as store:  # made as an inbox of an older agentbox was
        store.engine.conn.execute("PRAGMA auto_vacuum = NONE")
        store.engine.conn.execute("VACUUM")
        assert store.engine.conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    dest = tmp_path / "copy.sqlite3"
    assert cli("backup", str(dest), now=T0).code == 0
    with sqlite_store(dest) as copy:
        assert copy.engine.conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2


@pytest.mark.slow
def test_a_backup_taken_during_four_writers_restores_every_acked_event(
        home: Path, inbox_path: Path, tmp_path: Path,
        agentbox_proc: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    assert agentbox_proc("ingest", "s", "first").returncode == 0
    env = proc_env(home)
    logs = [tmp_path / f"writer-{n}.log" for n in range(4)]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(inbox_path), f"w{n}", str(log)],
                                env=env, stderr=subprocess.PIPE, text=True)
               for n, log in enumerate(logs)]

    def acked() -> set[str]:
        return {key for log in logs if log.exists() for key in log.read_text().split()}

    try:
        wait_for(lambda: all(log.exists() and len(log.read_text().split()) >= 20
                             for log in logs), "every writer to ack 20 events")
        before = acked()  # acked before the backup started
        dest = tmp_path / "backup.sqlite3"
        done = agentbox_proc("backup", str(dest), "--json")
        assert done.returncode == 0, done.stderr
        during = acked()
        wait_for(lambda: len(acked()) >= len(during) + 20, "the writers to keep going")
    finally:
        for writer in writers:
            writer.send_signal(signal.SIGTERM)
        for writer in writers:
            assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""
    assert len(before) >= 80 and len(acked()) > len(before)

    # restore: the writers are stopped, the backup takes the inbox's place
    os.replace(inbox_path, tmp_path / "damaged.sqlite3")
    for side in ("-wal", "-shm"):
        Path(f"{inbox_path}{side}").unlink(missing_ok=True)
    shutil.copy2(dest, inbox_path)
    checked = agentbox_proc("doctor", "--json")
    assert checked.returncode == 0, checked.stdout
    with sqlite_store(inbox_path) as restored:
        stored = {e.source_id for e in restored.events(("pending",), source="load",
                                                       limit=10**6)}
        assert restored.find("s", "first") is not None
    assert before <= stored
    assert stored <= acked()  # nothing that was never acked, no half transaction
