"""The defaults docs/settings.md lists are the ones the code has (rules/policy.py)."""

from __future__ import annotations

import re

from agentbox.config import KEYS
from agentbox.durations import parse_duration
from agentbox.rules.policy import Policy
from support.doc_examples import ROOT

ROW = re.compile(r"^\| `(\w+)` \| ([^|]+) \|", re.M)


def _as_written(cell: str) -> str:
    """'120 s' -> '120s', '10 min' -> '10m', '0 (off)' -> '0'."""
    return re.sub(r"\s*\(.*\)$", "", cell.strip()).replace(" min", "m").replace(" ", "")


def test_every_rule_setting_is_listed_with_the_default_policy_has() -> None:
    table = dict(ROW.findall((ROOT / "docs" / "settings.md").read_text(encoding="utf-8")))
    defaults = Policy()._asdict()
    assert set(defaults) <= set(table), "a setting missing from docs/settings.md"
    for key, default in defaults.items():
        written = _as_written(table[key])
        if default is None:  # a budget: none unless one is set
            assert written == "none", key
        elif KEYS[key].duration:
            assert (0 if written == "0" else parse_duration(written)) == default, key
        elif isinstance(default, bool):
            assert written == str(default).lower(), key
        else:
            assert written == str(default), key
