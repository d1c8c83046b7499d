"""How `agentbox scenarios` reads: a story above each table, one way of counting
steps, a clock that never runs backwards, and lines that fit 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from agentbox.cli.scenarios_cmd import ARTICLE, ARTICLE_CASES, AUTHOR
from agentbox.replay import load, load_all, run, shipped

SHIPPED = [name for name, _ in shipped()]


def _words(text: str) -> list[str]:
    return text.split()


def _piped(*argv: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """agentbox as a real process whose stdout is a pipe and stdin no terminal."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AGENTBOX_") and k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "agentbox", *argv], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_tells_its_story(name: str) -> None:
    scenario = load(name)
    assert 80 <= len(scenario.story) <= 450, "a story of two to five lines"
    assert scenario.story != scenario.description


@pytest.mark.parametrize("name", SHIPPED)
def test_the_clock_of_a_shipped_scenario_never_runs_backwards(name: str) -> None:
    moments = [result.at for result in run(load(name)).results]
    assert moments == sorted(moments)


def test_the_story_is_printed_between_the_title_and_the_table(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("scenarios", "5")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    title = lines.index("05-poison-event: A poison event arrives together with a healthy one")
    table = next(n for n, line in enumerate(lines) if line.startswith("┏"))
    between = " ".join(lines[title + 1:table])
    assert _words(between) == _words(load("5").story)


def test_the_article_is_named_once_when_shipped_scenarios_run(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for argv in (["scenarios"], ["scenarios", "3", "12"], ["scenarios", "--list"]):
        out = " ".join(cli(*argv).out.split())
        assert out.count(f'"{ARTICLE}", by {AUTHOR}') == 1, argv
        assert f"01-{ARTICLE_CASES:02d}" in out


def test_a_users_own_file_is_not_credited_to_the_article(
        cli: Callable[..., Any], tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('title = "mine"\nstory = "My own case."\n'
                    '[[step]]\ndo = "tick"\nexpect = 0\n', encoding="utf-8")
    result = cli("scenarios", str(mine))
    assert result.code == 0, result.err
    assert AUTHOR not in result.out and "My own case." in result.out


def test_steps_are_counted_alike_by_the_list_the_tables_and_the_summary(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Scenario 05 has 13 steps, four of them clock steps that check nothing."""
    monkeypatch.setenv("COLUMNS", "120")
    listed = {item["name"]: item["steps"]
              for item in json.loads(cli("scenarios", "--list", "--json").out)}
    doc = json.loads(cli("scenarios", "--json").out)
    human = cli("scenarios").out.splitlines()
    summary = {cells[0]: cells[1:] for cells in
               ([c.strip() for c in line.strip("│").split("│")] for line in human
                if line.startswith("│ ") and line.count("│") == 6)}
    for scenario in doc["scenarios"]:
        name, steps = scenario["name"], scenario["steps"]
        assert [s["n"] for s in steps] == list(range(1, len(steps) + 1))
        assert listed[name] == len(steps)
        checked = sum(s["ok"] is not None for s in steps)
        assert summary[name] == [str(len(steps)), str(checked), str(checked), "0"]
        assert f"│ {len(steps)}. " in "\n".join(human)
    assert (listed["05-poison-event"], doc["scenarios"][4]["checked"]) == (13, 9)


def test_a_failed_step_shows_what_it_observed_instead(
        cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    mine = tmp_path / "mine.toml"
    mine.write_text('title = "mine"\n[[step]]\ndo = "acquire"\nworker = "A"\nexpect = 7\n',
                    encoding="utf-8")
    result = cli("scenarios", str(mine))
    assert result.code == 1
    row = next(line for line in result.out.splitlines() if "1. A acquires" in line)
    assert [c.strip() for c in row.strip("│").split("│")] == [
        "1. A acquires the lease", "+0s", "7", "✗ 1"]


@pytest.mark.parametrize("argv", [["scenarios"], ["scenarios", "--list"]])
def test_piped_output_fits_80_columns_with_whole_tables(argv: list[str]) -> None:
    """Piped, rich draws for 80 columns: no line wider, none cut, none padded."""
    result = _piped(*argv)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    assert not [line for line in lines if line != line.rstrip()]
    tops = sum(line.startswith(("┏", "┌")) for line in lines)
    bottoms = sum(line.startswith("└") for line in lines)
    assert tops == bottoms == (len(SHIPPED) + 1 if argv == ["scenarios"] else 1)
    for line in lines:
        if line.startswith(("│", "┃")):  # a row is closed on the right, never cropped
            assert line.endswith(line[0])


def test_a_narrow_console_still_draws_whole_tables() -> None:
    result = _piped("scenarios", "8", "14", columns="50")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 50
    assert all(line.endswith(line[0]) for line in lines if line.startswith(("│", "┃")))


def test_every_story_is_in_the_json_documents(cli: Callable[..., Any]) -> None:
    stories = {s.name: s.story for s in load_all([])}
    doc = json.loads(cli("scenarios", "--json").out)
    assert {s["name"]: s["story"] for s in doc["scenarios"]} == stories
    listed = json.loads(cli("scenarios", "--list", "--json").out)
    assert {item["name"]: item["story"] for item in listed} == stories
