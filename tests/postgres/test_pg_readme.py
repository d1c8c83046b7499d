"""The README's tour runs on PostgreSQL too, where ids are not consecutive."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.doc_examples import ROOT, matches, play_page

pytestmark = pytest.mark.postgres_only


def _shape(line: str) -> str:
    """A line with its numbers and the padding they cause taken out."""
    line = re.sub(r"\d+", "N", line)
    return re.sub(r"([━─ ])\1+", r"\1", line)


def same_but_numbers(expected: list[str], actual: list[str]) -> bool:
    """The output the page shows, but for ids, generations and the column widths they set."""
    return matches([_shape(line) for line in expected], [_shape(line) for line in actual])


def test_the_shape_ignores_only_numbers() -> None:
    assert same_but_numbers(["stored chat/a as event 4", "│ 4  │ chat │"],
                            ["stored chat/a as event 12", "│ 12 │ chat │"])
    assert not same_but_numbers(["stored chat/a as event 4"], ["duplicate: chat/a is event 4"])


def test_the_readme_tour_runs_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    play_page(ROOT / "README.md", tmp_path, env={"AGENTBOX_DB": pg_url}, same=same_but_numbers)
