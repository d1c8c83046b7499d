"""The distribution's name: free on PyPI when chosen, and no page or message installs
agentbox from the index, where `agentbox` is another project."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from agentbox.location import POSTGRES_EXTRA
from support.doc_examples import ROOT

NAME = "agentbox-inbox"
# `pip install` followed, after any options, by a requirement naming agentbox itself
# (agentbox, 'agentbox[postgres]', agentbox-inbox, agentbox_inbox==0.2): what the
# index would resolve, not a path to a checkout or a wheel.
FROM_INDEX = re.compile(r"pip3?\s+install(?:\s+-{1,2}[\w-]+(?:[ =][^\s-]\S*)?)*\s+"
                        r"[\"']?agentbox(?:[-_.]inbox)?(?=[\[\"'\s=<>~!;]|$)", re.I | re.M)
TEXT = ("README.md", "CHANGELOG.md", "docs", "src", "tests", "bench", "tools", "completions",
        "scenarios", ".ci", "pyproject.toml")


def _files() -> list[Path]:
    found: list[Path] = []
    for name in TEXT:
        path = ROOT / name
        found += [path] if path.is_file() else [p for p in sorted(path.rglob("*"))
                                                 if p.is_file() and "__pycache__" not in p.parts]
    return found


def test_the_pattern_finds_what_it_must() -> None:
    for line in ("pip install agentbox", "pip install 'agentbox[postgres]'",
                 "pip install -U agentbox-inbox", "python -m pip install --quiet agentbox==0.1",
                 "pip3 install \"agentbox_inbox[postgres]\""):
        assert FROM_INDEX.search(line), line
    for line in ("pip install .", "pip install '.[postgres]'", "pip install -e '.[dev]'",
                 "pip install 'dist/agentbox_inbox-0.2.0-py3-none-any.whl[postgres]'",
                 "pip install 'psycopg[binary]'", "pip uninstall --yes agentbox",
                 "pip install ./agentbox-inbox"):
        assert not FROM_INDEX.search(line), line


def test_nothing_tells_a_user_to_install_agentbox_from_the_index() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]}"
                 for path in _files() if path.name != Path(__file__).name
                 for text in [path.read_text(encoding="utf-8", errors="replace")]
                 for m in FROM_INDEX.finditer(text)]
    assert offenders == []
    assert not FROM_INDEX.search(POSTGRES_EXTRA)


def test_the_distribution_is_the_name_checked_and_installs_the_agentbox_command() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == NAME
    assert project["scripts"] == {"agentbox": "agentbox.cli:main"}
    assert "postgres" in project["optional-dependencies"]
    assert NAME in packages_distributions()["agentbox"]  # the import package it installs
    install = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    # The check, its date and its command are written down, for agentbox and the new name.
    assert "On 2026-12-01" in install
    for name in ("agentbox", NAME):
        assert f"pip --isolated index versions {name}\n" in install
    assert f"No matching distribution found for {NAME}" in install
    assert POSTGRES_EXTRA in (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
