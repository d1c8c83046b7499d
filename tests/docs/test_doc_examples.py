"""Every shell example in README.md and docs/*.md runs, so the docs cannot drift.

The conventions and the runner are in support/doc_examples.py; its own tests
are test_doc_harness.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.doc_examples import PAGES, ROOT, play_page


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_on_the_page_runs_as_shown(page: Path, tmp_path: Path) -> None:
    play_page(page, tmp_path)
