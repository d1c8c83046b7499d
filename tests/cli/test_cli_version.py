"""`--version`, `python -m agentbox` and the console script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

import agentbox
from support.fixtures import Cli

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_distributions(cli: Cli, home: Path) -> None:
    result = cli("--version")
    assert (result.code, result.out, result.err) == (0, f"agentbox {version('agentbox-inbox')}\n",
                                                     "")
    assert not home.exists()


def test_the_version_is_written_once_and_the_changelog_has_it() -> None:
    """pyproject.toml takes it from agentbox.__version__; the newest release in
    CHANGELOG.md is that version, below the section where the next one's changes go."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "agentbox.__version__"}
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          re.M)
    assert headings[0] == "Unreleased"
    assert headings[1].startswith(f"{agentbox.__version__} - ")
    assert "](CHANGELOG.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_version_wins_over_a_bad_user_and_a_command(cli: Cli, home: Path) -> None:
    result = cli("--version", "--user", "../x", "ingest", "s", "1")
    assert result.code == 0 and result.out.startswith("agentbox ")
    assert not home.exists()


def test_python_dash_m(agentbox_proc: Any, home: Path) -> None:
    done = agentbox_proc("--version")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, f"agentbox {agentbox.__version__}\n", "")
    assert not home.exists()


@pytest.mark.slow
def test_python_dash_m_does_real_work(agentbox_proc: Any, home: Path) -> None:
    done = agentbox_proc("ingest", "s", "1", "--payload", '{"a": 1}', "--json")
    assert done.returncode == 0, done.stderr
    assert '"outcome": "stored"' in done.stdout
    conflict = agentbox_proc("ingest", "s", "1", "--payload", '{"a": 2}')
    assert conflict.returncode == 3
    bad = agentbox_proc("ingest", "s", "2", "--payload", "{")
    assert bad.returncode == 65
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("agentbox: error: ")
    usage = agentbox_proc("nosuchcommand")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_console_script(home: Path) -> None:
    from tempfile import gettempdir

    script = shutil.which("agentbox", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the agentbox console script is not installed beside this Python")
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60,
                          cwd=gettempdir())
    assert (done.returncode, done.stdout) == (0, f"agentbox {agentbox.__version__}\n")


def test_help_lists_the_inbox_commands(cli: Cli) -> None:
    result = cli("--help")
    assert result.code == 0
    for name in ("ingest", "status", "dead", "replay", "config"):
        assert name in result.out
