"""--user/-u and --db after the command mean what they mean before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.cli import build, hoist_root_options
from support.fixtures import Cli


def hoisted(*argv: str) -> list[str]:
    return hoist_root_options(build(list(argv)), list(argv))


def test_the_user_after_the_command_is_the_user(cli: Cli) -> None:
    assert cli("--user", "bob", "ingest", "chat", "1").code == 0
    before = cli("--user", "bob", "status", "--json")
    for argv in (["status", "--user", "bob", "--json"], ["status", "--json", "-u", "bob"],
                 ["status", "--user=bob", "--json"], ["status", "-ubob", "--json"]):
        after = cli(*argv)
        assert (after.code, after.out, after.err) == (0, before.out, ""), argv
    assert json.loads(before.out)["events"]["pending"] == 1


def test_in_a_subcommand_and_for_db(cli: Cli, tmp_path: Path) -> None:
    assert cli("config", "set", "max_batch", "7", "--user", "bob").code == 0
    got = cli("config", "get", "max_batch", "--json", "-u", "bob")
    assert (got.code, json.loads(got.out)["value"]) == (0, 7)
    assert cli("config", "get", "max_batch", "--json").out != got.out  # alice's is the default
    db = tmp_path / "other.sqlite3"
    assert cli("ingest", "chat", "1", "--db", str(db)).code == 0
    assert json.loads(cli("status", f"--db={db}", "--json").out)["events"]["pending"] == 1


def test_a_missing_value_is_one_usage_line(cli: Cli) -> None:
    result = cli("status", "--user")
    assert result.code == 2
    assert result.err == "agentbox: error: --user needs a value\n"


@pytest.mark.parametrize(("argv", "meant"), [
    # the later of two wins, as for any option given twice
    (["-u", "a", "status", "-u", "b"], ["-u", "a", "-u", "b", "status"]),
    # another option's value stays that option's
    (["ingest", "s", "1", "--payload", "--user"], ["ingest", "s", "1", "--payload", "--user"]),
    # the handler's or sender's own words after -- stay theirs
    (["run", "--user", "b", "--", "agent", "--user", "x"],
     ["--user", "b", "run", "--", "agent", "--user", "x"]),
    # dispatch takes every word after its first argument as the sender's
    (["dispatch", "cat", "--user", "b"], ["dispatch", "cat", "--user", "b"]),
    # a command's own option of that name is its own
    (["scenarios", "--db", "postgresql://x/y"], ["scenarios", "--db", "postgresql://x/y"]),
    # a user named like a command is still the root option's value
    (["--user", "status", "status", "--db", "f"], ["--user", "status", "--db", "f", "status"]),
])
def test_what_moves_and_what_stays(argv: list[str], meant: list[str]) -> None:
    assert hoisted(*argv) == meant
