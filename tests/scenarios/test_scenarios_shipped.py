"""The shipped scenarios: all pass, they carry the article's figures, and they ship."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.replay import Step, load, same, shipped

SHIPPED = [name for name, _ in shipped()]

# The figures the article's demo prints (article-scenarios-expected.txt), each as
# (step kind, expected value, fields the step must also have). Every one must be
# the expectation of a distinct step of the matching file.
FIGURES: dict[str, list[tuple[str, Any, dict[str, Any]]]] = {
    # first: True  retry: False  rows: 1
    "01": [("ingest", True, {}), ("ingest", False, {}), ("count", 1, {"what": "events"})],
    # A: 1  B: None
    "02": [("acquire", 1, {"worker": "A"}), ("acquire", "none", {"worker": "B"})],
    # events in one run: 3
    "03": [("run", 3, {})],
    # B before expiry: None; B after expiry: gen 2 re-claims ['msg-3']; A renews: gen 3;
    # A finishes its old claim (gen 1): False; msg-3: ('done', 2)  outbox rows: 1
    "04": [("acquire", 1, {"worker": "A"}), ("acquire", "none", {"worker": "B"}),
           ("acquire", 2, {"worker": "B"}), ("claim", ["msg-3"], {"worker": "B"}),
           ("acquire", 3, {"worker": "A"}), ("finish", False, {"worker": "A"}),
           ("event", ["done", 2], {"id": "msg-3"}), ("count", 1, {"what": "outbox"})],
    # W0 ['poison', 'healthy'] crashed; W1, W2 ['poison'] crashed; W3 ['healthy']
    # finished; W4 [] finished; poison: ('dead', 3)  healthy: ('done', 2)
    "05": [("crash", ["poison", "healthy"], {"worker": "W0"}),
           ("crash", ["poison"], {"worker": "W1"}), ("crash", ["poison"], {"worker": "W2"}),
           ("run", ["healthy"], {"worker": "W3"}), ("run", [], {"worker": "W4"}),
           ("event", ["dead", 3], {"id": "poison"}), ("event", ["done", 2], {"id": "healthy"})],
    # pass 1: 1  pass 2: 0; replay: 1 due, 1 event total; after the outage: events
    # total 2  skipped 3  late by 10 min  next due in 23.8 h
    "06": [("tick", 1, {}), ("tick", 0, {}), ("tick", 1, {}), ("count", 1, {"what": "events"}),
           ("count", 2, {"what": "events"}),
           ("payload", 3, {"timer": "digest", "field": "skipped"}),
           ("payload", 10, {"timer": "digest", "field": "late_by", "unit": "min"}),
           ("next_due", 23.8, {"timer": "digest", "unit": "h"})],
    # 881 -> expired; 882 -> expired; 883 yes -> yes, second tap no -> yes;
    # 883 after its expiry fired: yes; never requested -> unknown
    "07": [("answer", "expired", {"id": "refund-881", "reply": "yes"}),
           ("answer", "expired", {"id": "refund-882", "reply": "yes"}),
           ("answer", "yes", {"id": "refund-883", "reply": "yes"}),
           ("answer", "yes", {"id": "refund-883", "reply": "no"}),
           ("payload", "yes", {"id": "refund-883", "field": "answer"}),
           ("answer", "unknown", {})],
    # sends: ['update 0', 'update 1 | update 2']
    "08": [("sends", ["update 0", "update 1 | update 2"], {})],
}


def _fits(step: Step, kind: str, value: Any, wanted: dict[str, Any]) -> bool:
    return (step.kind == kind and same(value, step.expect)
            and all(step.args.get(k) == v for k, v in wanted.items()))


def test_the_article_cases_come_first_in_order() -> None:
    assert [name[:2] for name in SHIPPED[:8]] == list(FIGURES)
    assert len(SHIPPED) >= 11  # the article's eight and at least three more


@pytest.mark.parametrize("number", list(FIGURES))
def test_every_article_figure_is_an_expected_value(number: str) -> None:
    steps = list(load(number).steps)
    for kind, value, wanted in FIGURES[number]:
        match = next((s for s in steps if _fits(s, kind, value, wanted)), None)
        assert match is not None, f"scenario {number}: no {kind} step expecting {value!r}"
        steps.remove(match)  # each figure needs a step of its own


def test_every_shipped_scenario_passes_through_the_cli(
        cli: Callable[..., Any], home: Path) -> None:
    result = cli("scenarios")
    assert result.code == 0, result.out + result.err
    rows = [line for line in result.out.splitlines() if line.startswith("│")]
    assert sum("✓" in row for row in rows) > 100
    assert not [row for row in rows if "✗" in row]
    for name in SHIPPED:
        assert name in result.out
    assert "summary" in result.out
    assert not (home / "inboxes").exists()  # a throwaway inbox, never the user's


def test_every_shipped_scenario_passes_as_json(cli: Callable[..., Any]) -> None:
    result = cli("scenarios", "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["ok"] is True and doc["failed"] == 0
    assert [s["name"] for s in doc["scenarios"]] == SHIPPED
    assert doc["checked"] == doc["passed"] > 100
    for scenario in doc["scenarios"]:
        checked = [s for s in scenario["steps"] if s["ok"] is not None]
        assert checked and all(s["ok"] is True for s in checked)
        for step in checked:
            assert step["expected"] == step["observed"]


@pytest.mark.parametrize("token", ["4", "04", "lease-takeover", "04-lease-takeover",
                                   "04-lease-takeover.toml"])
def test_a_shipped_scenario_by_number_or_name(cli: Callable[..., Any], token: str) -> None:
    result = cli("scenarios", token, "--json")
    assert result.code == 0, result.err
    assert [s["name"] for s in json.loads(result.out)["scenarios"]] == ["04-lease-takeover"]


def test_an_unknown_name_is_a_usage_error(cli: Callable[..., Any]) -> None:
    result = cli("scenarios", "99")
    assert result.code == 2
    assert "no scenario named '99'" in result.err
    assert result.err.count("\n") == 1


def test_list_names_them(cli: Callable[..., Any]) -> None:
    result = cli("scenarios", "--list", "--json")
    assert result.code == 0
    assert [item["name"] for item in json.loads(result.out)] == SHIPPED


def test_found_after_install_from_any_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_")}
    env["AGENTBOX_HOME"] = str(tmp_path / "home")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = subprocess.run([sys.executable, "-m", "agentbox", "scenarios", "--list", "--json"],
                            cwd=elsewhere, env=env, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [item["name"] for item in json.loads(listed.stdout)] == SHIPPED
    ran = subprocess.run([sys.executable, "-m", "agentbox", "scenarios", "lease-takeover"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "04-lease-takeover" in ran.stdout and "✓" in ran.stdout
