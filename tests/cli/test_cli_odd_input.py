"""Odd but possible input: text rich would read as markup, bytes that are not UTF-8,
numbers past 64 bits, times outside the calendar, folders that cannot be made."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.clock import T0
from support.fixtures import Cli

NOT_UTF8 = os.fsdecode(b"x\xff")  # how a non-UTF-8 command-line word reaches Python


def one_line(err: str) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err and "unexpected" not in err, err


def test_text_that_looks_like_markup_is_shown_as_written(cli: Cli) -> None:
    assert cli("approve", "request", "a-1", "--expires-in", "1h", "--action", "[/x] [red]y",
               now=T0).code == 0
    listed = cli("approve", "list", now=T0)
    assert listed.code == 0, listed.err
    assert "[/x] [red]y" in listed.out


@pytest.mark.parametrize("argv", [
    ["approve", "request", NOT_UTF8, "--expires-in", "1h", "--action", "a"],
    ["approve", "request", "a-2", "--expires-in", "1h", "--action", NOT_UTF8],
    ["schedule", "add", NOT_UTF8, "--every", "1h"],
    ["schedule", "remove", NOT_UTF8],
    ["outbox", "resolve", NOT_UTF8, "--sent"],
    ["ingest", "s", NOT_UTF8],
], ids=["approval-id", "action", "timer-name", "remove", "resolve", "source-id"])
def test_a_word_that_is_not_utf8_is_bad_input(cli: Cli, argv: list[str]) -> None:
    result = cli(*argv, now=T0)
    assert result.code == 65
    one_line(result.err)
    assert "UTF-8" in result.err


def test_config_set_refuses_a_value_that_is_not_utf8(cli: Cli, home: Path) -> None:
    result = cli("config", "set", "handler", NOT_UTF8)
    assert result.code == 2
    one_line(result.err)
    assert not (home / "config.toml").exists()


@pytest.mark.parametrize("argv", [
    ["dead", "show", "99999999999999999999"],
    ["dead", "list", "-n", "99999999999999999999"],
    ["replay", "99999999999999999999"],
])
def test_a_number_past_64_bits_is_bad_input(cli: Cli, argv: list[str]) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0  # an inbox: no "no inbox" notice
    result = cli(*argv, now=T0)
    assert result.code == 65
    one_line(result.err)


@pytest.mark.sqlite_file  # the data folder of the files
def test_a_data_folder_that_cannot_be_made_is_one_clear_line(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("AGENTBOX_HOME", str(blocker / "home"))
    # no config can be there: the folder is the first thing made
    result = cli("ingest", "s", "1", now=T0)
    assert result.code == 1
    one_line(result.err)


def test_systemd_json_lists_the_units_it_wrote(cli: Cli, tmp_path: Path) -> None:
    result = cli("systemd", "--json", "--dir", str(tmp_path), "--", "/bin/true")
    assert result.code == 0, result.err
    units = json.loads(result.out)["units"]
    assert {Path(u["path"]).name for u in units} == {u["name"] for u in units}
    assert all((tmp_path / u["name"]).read_text() == u["text"] for u in units)
    assert {Path(u["name"]).suffix for u in units} == {".service", ".timer"}
