"""Concurrent `config set` processes never lose each other's writes.

Each process reads config.toml, changes one value and writes the file back;
without a lock two of them read the same old file and the second rename
drops the first one's change, although both said it was saved.
"""

from __future__ import annotations

import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from support.processes import proc_env

WRITERS = 16
ROUNDS = 3
TOP_KEYS = ("max_batch", "lease_ttl", "outbox_gap", "max_payload")


def together(home: Path, commands: list[list[str]]) -> None:
    """Start one `agentbox` process per command, release them at once, all must exit 0."""
    go = home / "go"
    # Every process waits for the same file, so they really start together.
    starter = ("import os, runpy, sys, time\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.002)\n"
               "sys.argv = ['agentbox', *sys.argv[1:]]\n"
               "runpy.run_module('agentbox', run_name='__main__')\n")
    procs = [subprocess.Popen([sys.executable, "-c", starter, *argv], env=proc_env(home),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for argv in commands]
    go.touch()
    for argv, proc in zip(commands, procs, strict=True):
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (argv, err)
    go.unlink()


def assert_tidy(home: Path) -> None:
    """No temporary file is left; the lock file stays, private."""
    assert sorted(p.name for p in home.iterdir()) == [".config.toml.lock", "config.toml"]
    assert stat.S_IMODE((home / ".config.toml.lock").stat().st_mode) == 0o600


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_parallel_config_set_keeps_every_write(home: Path, round_: int) -> None:
    home.mkdir(parents=True)
    path = home / "config.toml"
    path.write_text("max_attempts = 4\n")
    path.chmod(0o640)  # the operator's own choice of mode survives the rewrites
    expected: dict[tuple[str | None, str], int] = {}
    commands = []
    for n in range(WRITERS):
        if n % 4:  # twelve users' own tables
            user, key = f"user{n}", ("max_batch", "lease_ttl")[n % 2]
            commands.append(["--user", user, "config", "set", key, str(1000 + n)])
        else:  # the top level: four distinct keys, so none overwrites another
            user, key = None, TOP_KEYS[n // 4]
            commands.append(["config", "set", key, str(1000 + n), "--all-users"])
        expected[user, key] = 1000 + n
    together(home, commands)
    doc = tomllib.loads(path.read_text())
    assert doc["max_attempts"] == 4
    for (user, key), value in expected.items():
        table = doc if user is None else doc["users"][user]
        assert table.get(key) == value, (user, key, doc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert_tidy(home)


@pytest.mark.slow
def test_parallel_set_and_unset_keep_every_change(home: Path) -> None:
    home.mkdir(parents=True)
    path = home / "config.toml"
    path.write_text("".join(f"[users.user{n}]\nmax_attempts = {n + 1}\n"
                            for n in range(WRITERS)))
    together(home, [["--user", f"user{n}", "config", "unset", "max_attempts"] if n % 2
                    else ["--user", f"user{n}", "config", "set", "max_batch", str(n + 1)]
                    for n in range(WRITERS)])
    users = tomllib.loads(path.read_text())["users"]
    assert users == {f"user{n}": {"max_attempts": n + 1, "max_batch": n + 1}
                     for n in range(0, WRITERS, 2)}
    assert_tidy(home)
