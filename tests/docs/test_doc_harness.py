"""The doc-example runner can fail: a page whose example is wrong does not pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.doc_examples import PAGES, ROOT, blocks, commands, matches, play_page

OK = """\
```console
$ agentbox ingest chat m1 --payload '{"text": "hi"}'
stored chat/m1 as event 1
$ agentbox ingest chat m1 --payload '{"text": "changed"}'
conflict: chat/m1 is event 1 with a different payload; the first stands
[3]
```
"""


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def _fails(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)) as failed:
        play_page(_page(tmp_path, text), tmp_path / "run")
    assert says in str(failed.value)


def test_a_page_whose_examples_hold_passes(tmp_path: Path) -> None:
    play_page(_page(tmp_path, OK), tmp_path / "run")


@pytest.mark.parametrize(("broken", "says"), [
    (OK.replace("as event 1", "as event 2"), "--- the doc shows:"),
    (OK.replace("[3]\n", ""), "exited 3, the doc says 0"),
    (OK.replace("[3]", "[1]"), "exited 3, the doc says 1"),
    (OK.replace("```console", "```"), "a fence must name its language"),
    ("<!-- not run: -->\n" + OK, "'not run' needs a reason"),
    ("<!-- skip: because -->\n" + OK, "unknown directive ['skip']"),
    ("```sh\nfalse\n```\n", "the script exited 1"),
    ("```sh\n$ agentbox status\n```\n", "prompts belong in a console block"),
    ("```console\nstored\n```\n", "output before any '$ ' command"),
])
def test_a_wrong_example_fails_the_page(tmp_path: Path, broken: str, says: str) -> None:
    _fails(tmp_path, broken, says)


def test_state_carries_from_one_command_and_block_to_the_next(tmp_path: Path) -> None:
    page = """\
<!-- file: hello.txt -->
```text
hello
```

```console
$ greeting=$(cat hello.txt); export LOUD="$greeting!"
$ cd /tmp && cd - > /dev/null && echo "$LOUD"
hello!
```

<!-- clock: +1h -->
```console
$ echo "$AGENTBOX_NOW"
1796119200
```
"""
    play_page(_page(tmp_path, page), tmp_path / "run")


def test_a_command_that_hangs_fails_instead_of_waiting_for_ever(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support import doc_examples

    monkeypatch.setattr(doc_examples, "TIMEOUT", 1)
    _fails(tmp_path, "```console\n$ sleep 30\n```\n", "ran longer than 1s")


def test_ellipsis_matches_text_in_a_line_and_whole_lines() -> None:
    assert matches(["key ...-1 sent"], ["key 3f9c1a2b-1 sent"])
    assert matches(["first", "...", "last"], ["first", "a", "b", "last"])
    assert matches(["first", "...", "last"], ["first", "last"])
    assert not matches(["key ...-1 sent"], ["key 3f9c1a2b-2 sent"])
    assert not matches(["first", "last"], ["first", "middle", "last"])
    assert not matches(["a.b"], ["aXb"])  # only `...` is special


def test_commands_keep_their_continuation_lines_and_status(tmp_path: Path) -> None:
    page = _page(tmp_path, "```console\n$ printf '%s\\n' \\\n>   a b\na\nb\n[0]\n$ true\n```\n")
    (block,) = blocks(page)
    first, second = commands(block)
    assert first.text == "printf '%s\\n' \\\n  a b"
    assert (first.expected, first.status, first.line) == (["a", "b"], 0, 2)
    assert (second.text, second.expected, second.line) == ("true", [], 7)


def test_every_page_is_run_and_every_link_between_pages_resolves() -> None:
    docs = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {p.name for p in PAGES} == docs | {"README.md"}
    assert {"index.md", "design.md", "handler.md", "outbox.md", "scenarios.md",
            "settings.md", "performance.md", "development.md"} <= docs
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert all(f"]({name})" in index for name in docs - {"index.md"})
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)",
                                         page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), f"{page.name}: broken link to {target}"
            if anchor:
                assert anchor in _anchors(path), f"{page.name}: no #{anchor} in {target}"


def test_the_readme_stays_short() -> None:
    """The README is the front door; the reference lives in docs/."""
    assert len((ROOT / "README.md").read_bytes()) <= 15_000


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
