"""The committed shell completions match the live CLI, and they complete for real."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "completions"


@functools.cache
def _generator() -> ModuleType:
    """completions/generate.py, loaded once; each script is asked of the CLI once."""
    spec = importlib.util.spec_from_file_location("agentbox_completions_generate",
                                                  FOLDER / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate = functools.cache(module.generate)  # stale() looks it up by name
    return module


@pytest.mark.slow
def test_committed_scripts_match_the_live_cli() -> None:
    generate = _generator()
    assert set(generate.SCRIPTS.values()) == {"agentbox.bash", "_agentbox", "agentbox.fish"}
    for shell, name in generate.SCRIPTS.items():
        committed = (FOLDER / name).read_text(encoding="utf-8")
        assert committed == generate.generate(shell), (
            f"completions/{name} is stale; run: python completions/generate.py")


@pytest.mark.slow
def test_stale_detects_a_changed_script(tmp_path: Path) -> None:
    generate = _generator()
    for name in generate.SCRIPTS.values():
        shutil.copy(FOLDER / name, tmp_path / name)
    assert generate.stale(tmp_path) == []
    with (tmp_path / "_agentbox").open("a") as fh:
        fh.write("# edited by hand\n")
    (tmp_path / "agentbox.fish").unlink()
    assert generate.stale(tmp_path) == ["_agentbox", "agentbox.fish"]


def test_scripts_hold_no_machine_paths() -> None:
    for name in ("agentbox.bash", "_agentbox", "agentbox.fish"):
        text = (FOLDER / name).read_text(encoding="utf-8")
        assert "agentbox" in text and "_AGENTBOX_COMPLETE" in text
        for marker in (str(ROOT), str(Path.home()), sys.prefix, sys.executable, "/tmp/",
                       "/home/", "/root", "site-packages"):
            assert marker not in text, (name, marker)


def test_zsh_script_is_a_compdef_file() -> None:
    assert (FOLDER / "_agentbox").read_text().startswith("#compdef agentbox\n")


def bash_complete(tmp_path: Path, cases: dict[str, list[str]]) -> dict[str, list[str]]:
    """What the committed bash script offers for each case's words (the last one being
    completed), asking the agentbox under test."""
    # agentbox on PATH is the one under test: a shim running this interpreter
    shim = tmp_path / "agentbox"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agentbox "$@"\n')
    shim.chmod(0o755)
    script = FOLDER / "agentbox.bash"
    lines = [f'source "{script}"',
             'complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=();',
             '  _agentbox_completion agentbox; printf \'%s\\n\' "${COMPREPLY[@]}"; }']
    for name, words in cases.items():
        quoted = " ".join(f"'{w}'" for w in ["agentbox", *words])
        lines += [f"echo '--{name}'", f"complete_words {quoted}"]
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", "\n".join(lines)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = {}
    current = ""
    for line in done.stdout.splitlines():
        if line.startswith("--") and line[2:] in cases:
            current = line[2:]
            found[current] = []
        elif line:
            found[current].append(line)
    return found


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@pytest.mark.slow
@needs_bash
def test_bash_script_completes_commands_and_options(tmp_path: Path) -> None:
    from agentbox.cli.app import COMMANDS

    sections = bash_complete(tmp_path, {"commands": [""], "de": ["de"],
                                        "ingest": ["ingest", "--sig"]})
    assert {"ingest", "status", "dead", "replay", "config"} <= set(sections["commands"])
    assert set(COMMANDS) == set(sections["commands"])
    assert sections["de"] == ["dead"]
    assert sections["ingest"] == ["--signature"]


CHOICES = {
    "catch-up": (["schedule", "add", "t", "--every", "1h", "--catch-up", ""], ["coalesce", "each"]),
    "mode": (["dispatch", "--mode", ""], ["at-least-once", "at-most-once"]),
    "mode-prefix": (["dispatch", "--mode", "at-m"], ["at-most-once"]),
    "answer": (["approve", "answer", "deploy-1", ""], ["no", "yes"]),
    "config-get": (["config", "get", "max_"],
                   ["max_attempts", "max_batch", "max_payload", "max_send_tries", "max_state",
                    "max_step_output"]),
    "config-set": (["config", "set", "deliv"], ["delivery"]),
    "config-unset": (["config", "unset", "send"], ["send_timeout", "sender"]),
}


@pytest.mark.slow
@needs_bash
def test_bash_script_completes_fixed_choices(tmp_path: Path) -> None:
    """Options and arguments with a fixed set of values complete those values."""
    found = bash_complete(tmp_path, {name: words for name, (words, _) in CHOICES.items()})
    assert {name: sorted(values) for name, values in found.items()} == {
        name: expected for name, (_, expected) in CHOICES.items()}
