"""What `--db` may point at: a symlink, a FIFO, a device, an empty file.

Real processes: the umask is per process, and a FIFO opened for reading
blocks the whole process until a writer comes (a hang the test must see as
a timeout, not as a stuck test run).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import proc_env
from support.sqlite import null_device

pytestmark = pytest.mark.slow


def agentbox(home: Path, *argv: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    def set_umask() -> None:
        os.umask(umask)

    return subprocess.run([sys.executable, "-m", "agentbox", *argv], env=proc_env(home),
                          capture_output=True, text=True, timeout=60, preexec_fn=set_umask)


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_a_dangling_symlink_is_refused_and_nothing_is_made(home: Path, tmp_path: Path,
                                                           umask: int) -> None:
    target = tmp_path / "elsewhere" / "inbox.sqlite3"
    target.parent.mkdir()
    link = tmp_path / "link.sqlite3"
    link.symlink_to(target)
    done = agentbox(home, "--db", str(link), "ingest", "s", "1", umask=umask)
    assert done.returncode == 1, done.stderr
    assert "symlink" in done.stderr and str(target) in done.stderr
    assert not target.exists() and link.is_symlink()
    assert sorted(p.name for p in target.parent.iterdir()) == []


def test_a_symlink_to_an_inbox_is_followed(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "inbox.sqlite3"
    assert agentbox(home, "--db", str(target), "ingest", "s", "1").returncode == 0
    link = tmp_path / "link.sqlite3"
    link.symlink_to(target)
    done = agentbox(home, "--db", str(link), "ingest", "s", "2")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_file_that_is_not_regular_is_refused_at_once(home: Path, tmp_path: Path,
                                                      kind: str) -> None:
    if kind == "fifo":
        path = tmp_path / "inbox.fifo"
        os.mkfifo(path)
    else:
        path = null_device(tmp_path / "inbox.device")
    for argv in (["status"], ["ingest", "s", "1"]):
        done = agentbox(home, "--db", str(path), *argv)  # a hang fails on the timeout
        assert done.returncode == 1, done.stderr
        assert "not a regular file" in done.stderr
        assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask-022", "umask-000"])
def test_an_empty_file_of_ours_becomes_a_private_inbox(home: Path, tmp_path: Path,
                                                       umask: int) -> None:
    """A crash between creating the file and its first migration leaves it empty:
    the next command must carry on, and an inbox is 0600 whatever the file was."""
    path = tmp_path / "touched.sqlite3"
    path.touch()
    path.chmod(0o666)
    done = agentbox(home, "--db", str(path), "ingest", "s", "1", umask=umask)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file of another user")
def test_an_empty_file_of_another_user_is_refused(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "planted.sqlite3"
    path.touch()
    path.chmod(0o666)
    os.chown(path, 65534, 65534)  # nobody
    done = agentbox(home, "--db", str(path), "ingest", "s", "1")
    assert done.returncode == 1, done.stderr
    assert "belongs to another user" in done.stderr
    assert path.stat().st_size == 0
