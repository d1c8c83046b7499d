"""`agentbox systemd`: a oneshot service and its timer, checked by systemd itself."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from agentbox.cli.systemd_cmd import systemd_quote


def units(cli, *argv: str) -> dict[str, str]:
    result = cli("systemd", "--json", *argv)
    assert result.code == 0, result.err
    return {u["name"]: u["text"] for u in json.loads(result.out)}


def exec_start(service: str) -> list[str]:
    [line] = [s for s in service.splitlines() if s.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart=").replace("%%", "%"))


def test_a_service_and_timer_pair(cli, home):
    found = units(cli, "--every", "5m", "--", "python3", "agent.py", "--tag", "a b%c")
    service, timer = found["agentbox-alice.service"], found["agentbox-alice.timer"]
    assert "Type=oneshot" in service.splitlines()
    argv = exec_start(service)
    assert argv[:3] == [sys.executable, "-m", "agentbox"]
    assert argv[3:] == ["--user", "alice", "run", "--until-empty", "--",
                        shutil.which("python3"), "agent.py", "--tag", "a b%c"]
    assert f"Environment=AGENTBOX_HOME={home.resolve()}" in service
    assert "SuccessExitStatus=75" in service
    lines = timer.splitlines()
    for expected in ("OnBootSec=5m", "OnUnitActiveSec=5m", "Persistent=true",
                     "Unit=agentbox-alice.service", "WantedBy=timers.target"):
        assert expected in lines


def test_the_handler_may_come_from_config(cli):
    result = cli("systemd")
    assert result.code == 0
    assert "no handler is configured yet" in result.err
    assert "# agentbox-alice.service" in result.out and "OnUnitActiveSec=1m" in result.out
    assert exec_start(units(cli)["agentbox-alice.service"])[-2:] == ["run", "--until-empty"]
    assert cli("config", "set", "handler", "python3 agent.py").code == 0
    assert cli("systemd").err == ""
    assert cli("systemd", "--every", "often").code == 2


@pytest.mark.parametrize(("word", "spelled"), [
    ("plain/path-1.py", "plain/path-1.py"),
    ("50%", "50%%"),
    ("$HOME", "$$HOME"),
    ("two words", '"two words"'),
    ('say "hi"\\', '"say \\"hi\\"\\\\"'),
    ("", '""'),
])
def test_systemd_quoting(word, spelled):
    assert systemd_quote(word) == spelled


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_units(cli, tmp_path):
    target = tmp_path / "units"
    result = cli("systemd", "--dir", str(target), "--every", "90s", "--", sys.executable,
                 "agent.py", "--note", "50% of $HOME's \"stuff\"")
    assert result.code == 0, result.err
    files = sorted(target.iterdir())
    assert [f.name for f in files] == ["agentbox-alice.service", "agentbox-alice.timer"]
    assert result.out.splitlines() == [str(f) for f in files]
    check = subprocess.run(["systemd-analyze", "verify", *map(str, files)],
                           capture_output=True, text=True, timeout=120)
    complaints = [line for line in check.stderr.splitlines() if "agentbox-alice" in line]
    assert check.returncode == 0 and complaints == [], check.stderr
    # A broken unit is caught by the same check, so the check is worth something.
    broken = tmp_path / "broken.service"
    broken.write_text(files[0].read_text().replace("ExecStart=/", "ExecStart=", 1))
    bad = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0
