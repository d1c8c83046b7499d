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

from proctools import proc_env

WRITERS = 16
ROUNDS = 3
TOP_KEYS = ("max_batch", "lease_ttl", "outbox_gap", "max_payload")


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_parallel_config_set_keeps_every_write(home: Path, round_: int) -> None:
    home.mkdir(parents=True)
    path = home / "config.toml"
    path.write_text("max_attempts = 4\n")
    path.chmod(0o640)  # the operator's own choice of mode survives the rewrites
    env = proc_env(home)
    go = home / "go"
    # Every process waits for the same file, so they really start together.
    starter = ("import os, runpy, sys, time\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.002)\n"
               "sys.argv = ['agentbox', *sys.argv[1:]]\n"
               "runpy.run_module('agentbox', run_name='__main__')\n")
    procs = []
    for n in range(WRITERS):
        if n % 4:  # a user's own table: two keys in each of twelve tables
            key, scope = ("max_batch", "lease_ttl")[n % 2], ["--user", f"user{n}"]
        else:  # the top level: four distinct keys, so none overwrites another
            key, scope = TOP_KEYS[n // 4], []
        args = [*scope, "config", "set", key, str(1000 + n), *([] if scope else ["--all-users"])]
        procs.append((n, key, subprocess.Popen(
            [sys.executable, "-c", starter, *args], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)))
    go.touch()
    for n, _, proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (n, err)
    doc = tomllib.loads(path.read_text())
    assert doc["max_attempts"] == 4
    for n, key, _ in procs:
        table = doc["users"][f"user{n}"] if n % 4 else doc
        assert table.get(key) == 1000 + n, (n, key, doc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    leftovers = sorted(p.name for p in home.iterdir()
                       if p.name not in ("config.toml", "go", ".config.toml.lock"))
    assert leftovers == []
    assert stat.S_IMODE((home / ".config.toml.lock").stat().st_mode) == 0o600
