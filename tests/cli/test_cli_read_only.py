"""A command that only reads never creates an inbox: it says so and answers as for an
empty one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import is_url
from support.clock import T0
from support.fixtures import Cli
from support.store import place_snapshot, users_at

# Each read-only command, as JSON where it has JSON: the same answer as a new inbox gives.
SAME_AS_EMPTY = [
    ["status", "--json"],
    ["dead", "--json"],
    ["dead", "list", "--json"],
    ["events", "--json"],
    ["events", "list", "--state", "pending", "--json"],
    ["outbox", "--json"],
    ["outbox", "list", "--all", "--json"],
    ["schedule", "list", "--json"],
    ["approve", "list", "--json"],
]
OTHERS = [["metrics"], ["doctor", "--json"], ["status"], ["events"]]


@pytest.mark.parametrize("argv", SAME_AS_EMPTY + OTHERS, ids=" ".join)
def test_nothing_is_created_and_the_user_is_told(cli: Cli, home: Path, place: str,
                                                 argv: list[str]) -> None:
    result = cli(*argv, now=T0)
    assert result.code == 0, result.err
    assert result.err == "agentbox: no inbox for user 'alice' (inboxes: none yet)\n"
    assert not home.exists()
    assert place_snapshot(place) is None  # no file, no schema


@pytest.mark.parametrize("argv", SAME_AS_EMPTY, ids=" ".join)
def test_the_answer_is_that_of_an_empty_inbox(cli: Cli, place: str, argv: list[str]) -> None:
    missing = cli(*argv, now=T0)
    assert cli("schedule", "tick", now=T0).code == 0  # writes: makes alice's empty inbox
    assert users_at(place) == ["alice"]
    empty = cli(*argv, now=T0)
    assert (empty.code, empty.err) == (0, "")
    assert json.loads(missing.out) == json.loads(empty.out)


def test_the_notice_names_the_inboxes_that_exist(cli: Cli, place: str) -> None:
    for user in ("bob", "carol"):
        assert cli("-u", user, "ingest", "s", "1", now=T0).code == 0
    if not is_url(place):  # a file whose name is no user's is no inbox
        (Path(place) / "not a user.sqlite3").write_bytes(b"")
    before = place_snapshot(place)
    result = cli("-u", "alcie", "events", "--json", now=T0)
    assert (result.code, json.loads(result.out)) == (0, [])
    assert result.err == "agentbox: no inbox for user 'alcie' (inboxes: bob, carol)\n"
    assert place_snapshot(place) == before


@pytest.mark.sqlite_file
def test_a_missing_db_file_is_named(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.sqlite3"
    result = cli("--db", str(target), "dead", "--json", now=T0)
    assert (result.code, result.out.strip()) == (0, "[]")
    assert result.err == f"agentbox: no inbox at {target}\n"
    assert not target.exists()


def test_an_error_after_the_notice_is_still_one_error_line(cli: Cli, home: Path) -> None:
    result = cli("events", "show", "5", now=T0)
    assert result.code == 65
    notice, error = result.err.splitlines()
    assert notice.startswith("agentbox: no inbox for user 'alice'")
    assert error == "agentbox: error: no event with id 5"
    assert not home.exists()


@pytest.mark.parametrize("argv", [["prune"], ["prune", "--dry-run"], ["backup", "DEST"]])
def test_commands_that_act_on_a_file_refuse_without_one(cli: Cli, place: str, tmp_path: Path,
                                                        one_error: Any, argv: list[str]) -> None:
    assert cli("-u", "bob", "ingest", "s", "1", now=T0).code == 0
    result = cli(*[str(tmp_path / "x.sqlite3") if a == "DEST" else a for a in argv], now=T0)
    assert result.code == 65
    assert one_error(result.err) == ("agentbox: error: no inbox for user 'alice' "
                                     "(inboxes: bob)")
    assert users_at(place) == ["bob"]
    assert not (tmp_path / "x.sqlite3").exists()


def test_a_command_that_writes_still_creates_the_inbox(cli: Cli, place: str) -> None:
    result = cli("ingest", "s", "1", now=T0)
    assert (result.code, result.err) == (0, "")
    assert users_at(place) == ["alice"]
    assert cli("status", now=T0).err == ""
