"""`config get KEY` (the value in force and where it comes from) and `config unset KEY`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from support.fixtures import Cli


def got(cli: Cli, key: str, *flags: str) -> dict[str, Any]:
    result = cli(*flags, "config", "get", key, "--json")
    assert result.code == 0, result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def test_get_names_the_layer_the_value_comes_from(cli: Cli, home: Path) -> None:
    path = str(home / "config.toml")
    assert got(cli, "max_batch") == {"key": "max_batch", "value": 100, "origin": "default",
                                     "written": None, "user": "alice", "path": path}
    assert not home.exists()  # asking creates nothing
    assert cli("config", "set", "max_batch", "7", "--all-users").code == 0
    assert got(cli, "max_batch")["value"] == 7 and got(cli, "max_batch")["origin"] == "config"
    assert cli("config", "set", "max_batch", "9").code == 0
    mine = got(cli, "max_batch")
    assert (mine["value"], mine["origin"], mine["written"]) == (9, "config [users.alice]", 9)
    bob = got(cli, "max_batch", "--user", "bob")
    assert (bob["value"], bob["origin"], bob["user"]) == (7, "config", "bob")


def test_get_shows_the_parsed_value_and_what_was_written(cli: Cli) -> None:
    assert cli("config", "set", "outbox_gap", "30m").code == 0
    assert cli("config", "set", "handler", "python3 'my agent.py' --fast").code == 0
    gap = got(cli, "outbox_gap")
    assert (gap["value"], gap["written"]) == (1800, "30m")
    handler = got(cli, "handler")
    assert handler["value"] == ["python3", "my agent.py", "--fast"]
    human = cli("config", "get", "handler")
    assert human.code == 0
    assert human.out == ("handler = python3 'my agent.py' --fast  "
                         "(from config [users.alice])\n")
    assert cli("config", "get", "outbox_gap").out == (
        'outbox_gap = 1800  (from config [users.alice], written "30m")\n')
    assert cli("config", "get", "sender").out == "sender = -  (default)\n"


def test_get_and_unset_refuse_an_unknown_key(cli: Cli, home: Path, one_error: Any) -> None:
    for argv in (["get", "max_bach"], ["unset", "max_bach"]):
        result = cli("config", *argv)
        assert result.code == 2
        assert "unknown setting 'max_bach'" in one_error(result.err)
    assert not home.exists()


def test_unset_mirrors_set_scoping(cli: Cli, home: Path) -> None:
    assert cli("config", "set", "max_batch", "7", "--all-users").code == 0
    assert cli("config", "set", "max_batch", "9").code == 0
    assert cli("--user", "bob", "config", "set", "max_batch", "11").code == 0
    result = cli("config", "unset", "max_batch", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "key": "max_batch", "removed": True, "user": "alice", "path": str(home / "config.toml"),
        "value": 7, "origin": "config"}
    doc = tomllib.loads((home / "config.toml").read_text())
    assert doc == {"max_batch": 7, "users": {"bob": {"max_batch": 11}}}  # no empty table left
    assert got(cli, "max_batch")["origin"] == "config"
    assert got(cli, "max_batch", "--user", "bob")["value"] == 11
    top = cli("config", "unset", "max_batch", "--all-users")
    assert top.code == 0
    assert "in force for alice now: 100 (default)" in top.out
    assert got(cli, "max_batch")["origin"] == "default"
    assert tomllib.loads((home / "config.toml").read_text()) == {
        "users": {"bob": {"max_batch": 11}}}


def test_unset_of_a_key_that_is_not_set_is_fine_and_says_so(cli: Cli, home: Path) -> None:
    result = cli("config", "unset", "max_batch", "--json")
    assert result.code == 0
    assert json.loads(result.out)["removed"] is False
    assert not home.exists()  # no config file: nothing is made
    assert cli("config", "set", "lease_ttl", "60").code == 0
    before = (home / "config.toml").read_bytes()
    human = cli("config", "unset", "max_batch")
    assert human.code == 0
    assert "max_batch was not set for user alice" in human.out
    assert (home / "config.toml").read_bytes() == before


def test_unset_repairs_a_config_with_an_unknown_key(cli: Cli, home: Path,
                                                   one_error: Any) -> None:
    home.mkdir()
    (home / "config.toml").write_text('max_bach = 5\n[users.alice]\nlease_ttl = "soon"\n')
    assert cli("config", "show").code == 2  # a broken config stops every command
    assert cli("config", "unset", "max_bach", "--all-users").code == 0
    still = cli("config", "get", "lease_ttl")
    assert still.code == 2 and "lease_ttl" in one_error(still.err)
    assert cli("config", "unset", "lease_ttl").code == 0
    assert got(cli, "lease_ttl")["origin"] == "default"
    assert tomllib.loads((home / "config.toml").read_text()) == {}


@pytest.mark.parametrize("key", ["max_batch", "handler"])
def test_get_of_a_bad_user_is_65(cli: Cli, home: Path, one_error: Any, key: str) -> None:
    result = cli("--user", "../x", "config", "get", key)
    assert result.code == 65
    one_error(result.err)
