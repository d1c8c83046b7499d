"""`agentbox ingest` ends its process without the interpreter's teardown.

What must still hold in a real process: the output is all there, the exit
code is the command's, the inbox was closed first (SQLite folds the log back
into the file and removes it when the last connection closes), and a reader
that went away is exit 1 with nothing printed, not Python's shutdown warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import proc_env


def buffered_env(home: Path) -> dict[str, str]:
    """The output held in Python's buffers until the end, as on a pipe by default."""
    env = proc_env(home)
    env.pop("PYTHONUNBUFFERED", None)
    return env


def ingest(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentbox", "ingest", *args],
                          capture_output=True, text=True, env=buffered_env(home), timeout=60)


@pytest.mark.sqlite_file  # the file closed: no -wal left
def test_output_code_and_closed_inbox_survive_the_quick_exit(home: Path) -> None:
    stored = ingest(home, "github", "d-1", "--payload", '{"n": 1}')
    assert (stored.returncode, stored.stdout, stored.stderr) == (
        0, "stored github/d-1 as event 1\n", "")
    inbox = home / "inboxes" / "alice.sqlite3"
    assert inbox.exists()
    assert not Path(f"{inbox}-wal").exists()  # closed before the process ended

    conflict = ingest(home, "github", "d-1", "--payload", '{"n": 2}', "--json")
    assert conflict.returncode == 3
    assert json.loads(conflict.stdout) == {
        "outcome": "conflict", "id": 1, "source": "github", "source_id": "d-1"}

    bad = ingest(home, "github", "d-2", "--payload", "[1]")
    assert bad.returncode == 65
    assert bad.stdout == "" and bad.stderr.startswith("agentbox: ")


def test_a_reader_gone_before_the_output_is_exit_1_without_a_warning(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "agentbox", "ingest", "github", "d-1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=buffered_env(home))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert (proc.wait(timeout=60), proc.stderr.read()) == (1, b"")
    # The event was stored before the output failed: a retry is a duplicate.
    assert ingest(home, "github", "d-1").stdout.startswith("duplicate: ")
