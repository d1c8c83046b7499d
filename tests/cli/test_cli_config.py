"""`config show | set | path`, and what a broken config.toml does to every command."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli


def shown(cli: Cli, *flags: str) -> dict[str, dict[str, Any]]:
    result = cli(*flags, "config", "show", "--json")
    assert result.code == 0, result.err
    return {row["key"]: row for row in json.loads(result.out)}


def test_path_is_under_agentbox_home_and_says_when_nothing_is_there(cli: Cli,
                                                                    home: Path) -> None:
    result = cli("config", "path")
    assert (result.code, result.out) == (0, f"{home / 'config.toml'}\n")
    assert result.err == (f"agentbox: no config file there yet, nor its folder {home}; every "
                          "setting has its default until `agentbox config set` writes one\n")
    assert not home.exists()  # asking where it lives creates nothing
    home.mkdir()
    folder_only = cli("config", "path")
    assert folder_only.out == result.out
    assert folder_only.err.startswith("agentbox: no config file there yet; every setting")
    assert cli("config", "set", "max_batch", "7").code == 0
    assert cli("config", "path").err == ""


def test_show_defaults(cli: Cli, home: Path) -> None:
    rows = shown(cli)
    assert rows["lease_ttl"]["value"] == 120 and rows["lease_ttl"]["origin"] == "default"
    assert rows["max_attempts"]["value"] == 3
    assert rows["outbox_gap"]["value"] == 3600
    assert rows["max_payload"]["value"] == 256 * 1024
    assert rows["retry_backoff"]["value"] == 0
    assert rows["delivery"]["value"] == "at-least-once"
    assert rows["handler"]["value"] is None
    for row in rows.values():
        assert set(row) == {"key", "value", "origin", "help"} and row["help"]
    assert not home.exists()


def test_bare_config_is_config_show(cli: Cli) -> None:
    bare = cli("config", "--json")
    assert bare.code == 0
    assert json.loads(bare.out) == json.loads(cli("config", "show", "--json").out)
    table = cli("config")
    assert table.code == 0 and "lease_ttl" in table.out


def test_set_for_the_user_and_for_everyone(cli: Cli, home: Path) -> None:
    assert cli("config", "set", "lease_ttl", "15m").code == 0
    result = cli("config", "set", "max_attempts", "5", "--all-users", "--json")
    assert result.code == 0
    assert json.loads(result.out) == {"key": "max_attempts", "value": 5, "user": None,
                                      "path": str(home / "config.toml")}
    assert cli("config", "set", "handler", "python3 agent.py --fast").code == 0
    assert cli("config", "set", "sender", "123").code == 0
    doc = tomllib.loads((home / "config.toml").read_text())
    assert doc == {"max_attempts": 5,
                   "users": {"alice": {"lease_ttl": "15m", "handler": "python3 agent.py --fast",
                                       "sender": "123"}}}
    rows = shown(cli)
    assert (rows["lease_ttl"]["value"], rows["lease_ttl"]["origin"]) == (
        900, "config [users.alice]")
    assert (rows["max_attempts"]["value"], rows["max_attempts"]["origin"]) == (5, "config")
    assert rows["handler"]["value"] == ["python3", "agent.py", "--fast"]
    assert rows["sender"]["value"] == ["123"]
    # another user sees the shared default but not alice's table
    bob = shown(cli, "--user", "bob")
    assert bob["lease_ttl"]["origin"] == "default" and bob["max_attempts"]["value"] == 5
    assert stat.S_IMODE((home / "config.toml").stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    # no temp file left; the lock file stays (removing it would race the next writer)
    assert sorted(p.name for p in home.iterdir()) == [".config.toml.lock", "config.toml"]


def test_set_human_output(cli: Cli, home: Path) -> None:
    result = cli("config", "set", "outbox_gap", "30m")
    assert result.out == f"outbox_gap = '30m' for user alice in {home / 'config.toml'}\n"


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("max_attempts", "0", "at least 1"),
    ("max_attempts", "three", "whole number"),
    ("lease_ttl", "soon", "not a duration"),
    ("lease_ttl", "0", "positive"),
    ("delivery", "twice", "at-least-once"),
    ("handler", "'unclosed", "cannot split"),
    ("no_such_key", "1", "unknown setting"),
    ("sources.s.preset", "gitlab", "preset must be one of github, stripe"),
    ("sources.s.id_header", "X Id", "not an HTTP header name"),
    ("sources.s.id_field", ".id", "dotted path"),
    ("sources.s.signature", "md5", "signature must be one of github, stripe, hmac-sha256"),
    ("sources.s.tolerance", "0", "must be positive"),
    ("sources.s.secret_env", "", "non-empty"),
    ("sources.s.colour", "red", "unknown setting 'colour' of a source"),
    ("sources.timer.id_header", "X", "agentbox's own"),
    ("sources.id_header", "X", "sources.NAME.KEY"),
    ("channels.sms.gap", "soon", "channels.sms.gap: not a duration"),
    ("channels.sms.quiet_hours", "25:00-07:00", "HH:MM-HH:MM"),
    ("channels.sms.max_per_day", "0", "at least 1"),
    ("channels.sms.sender", '["unclosed', "JSON array"),
    ("channels.sms.colour", "red", "unknown setting 'colour' of a channel"),
    ("channels.gap", "4h", "channels.NAME.KEY"),
])
def test_set_refuses_bad_values_and_writes_nothing(cli: Cli, home: Path, one_error: Any,
                                                   tree_snapshot: Any, key: str, value: str,
                                                   needle: str) -> None:
    assert cli("config", "set", "max_batch", "7").code == 0
    before = tree_snapshot(home)
    result = cli("config", "set", key, value)
    assert result.code == 2
    assert needle in one_error(result.err)
    assert tree_snapshot(home) == before


def test_set_with_bad_user_name_writes_nothing(cli: Cli, home: Path, one_error: Any) -> None:
    result = cli("--user", "../x", "config", "set", "max_batch", "7")
    assert result.code == 65
    one_error(result.err)
    assert not home.exists()


@pytest.mark.parametrize(("text", "needle"), [
    ("max_batch = = 3\n", "invalid TOML"),
    ("users = 3\n", "[users]"),
    ("[users]\nalice = 3\n", "[users.alice]"),
    ("[users.alice]\nmax_payload = -1\n", "[users.alice]"),  # the one ingest reads
    ('database = ""\n', "database"),  # where the inbox is: every command reads it
])
@pytest.mark.backend_free  # the config file's own mistakes; AGENTBOX_DB would mask `database`
def test_what_ingest_cannot_do_without_stops_it_in_one_line(
        cli: Cli, home: Path, one_error: Any, text: str, needle: str) -> None:
    home.mkdir()
    (home / "config.toml").write_text(text)
    for argv in (["ingest", "s", "1"], ["config", "show"]):
        result = cli(*argv, now=T0)
        assert result.code == 2, (argv, result)
        assert needle in one_error(result.err)
    assert sorted(p.name for p in home.iterdir()) == ["config.toml"]  # nothing was stored
    assert (home / "config.toml").read_text() == text


@pytest.mark.parametrize(("text", "needle", "reader"), [
    ("max_batch = 0\n", "max_batch", ["run", "--", "true"]),
    ("lease_ttl = 1.5\n", "lease_ttl", ["run", "--", "true"]),
    ("lease_ttl = true\n", "lease_ttl", ["schedule", "tick"]),
    ('delivery = "maybe"\n', "delivery", ["dispatch"]),
    ("handler = [1, 2]\n", "handler", ["run"]),  # `run -- CMD` would not read it
])
def test_a_bad_value_stops_the_commands_that_read_it_not_ingest(
        cli: Cli, home: Path, one_error: Any, text: str, needle: str, reader: list[str]) -> None:
    home.mkdir()
    (home / "config.toml").write_text(text)
    stored = cli("ingest", "s", "1", now=T0)
    assert (stored.code, stored.err) == (0, "")  # the webhook's delivery is kept
    for argv in (reader, ["config", "show"]):
        result = cli(*argv, now=T0)
        assert result.code == 2, (argv, result)
        assert needle in one_error(result.err)
    assert cli("status", "--json", now=T0).code == 0
    assert (home / "config.toml").read_text() == text


def test_a_typo_in_a_key_is_a_warning_and_every_command_goes_on(cli: Cli, home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("max_attempts = 5\nmax_bach = 7\n")
    warning = (f"agentbox: warning: {home / 'config.toml'}: unknown setting 'max_bach' is "
               "ignored; did you mean 'max_batch'?\n")
    stored = cli("ingest", "s", "1", "--json", now=T0)
    assert (stored.code, json.loads(stored.out)["outcome"]) == (0, "stored")
    assert stored.err == warning
    assert cli("run", "--", "sh", "-c", "cat >/dev/null", now=T0).code == 0
    assert shown(cli)["max_attempts"]["value"] == 5  # the rest of the file still counts
    assert cli("doctor", now=T0).code == 1  # where an unknown key is a failure


def test_invalid_toml_is_never_overwritten(cli: Cli, home: Path, one_error: Any) -> None:
    home.mkdir()
    (home / "config.toml").write_text("max_batch = = 3\n")
    result = cli("config", "set", "max_batch", "2", "--all-users")
    assert result.code == 2
    assert "invalid TOML" in one_error(result.err)
    assert (home / "config.toml").read_text() == "max_batch = = 3\n"


def test_config_set_repairs_a_bad_value(cli: Cli, home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("max_batch = 0\n")
    assert cli("run", "--", "true", now=T0).code == 2
    assert cli("config", "set", "max_batch", "2", "--all-users").code == 0
    assert cli("run", "--", "true", now=T0).code == 0


def test_config_that_is_not_utf8_is_one_line(cli: Cli, home: Path, one_error: Any) -> None:
    home.mkdir()
    (home / "config.toml").write_bytes(b"max_batch = 3 # \xff\n")
    result = cli("config", "show")
    assert result.code == 2
    one_error(result.err)


def test_another_users_bad_table_does_not_matter(cli: Cli, home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("[users.bob]\nmax_batch = 0\n")
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert cli("--user", "bob", "ingest", "s", "1", now=T0).code == 0  # ingest reads no max_batch
    assert cli("--user", "bob", "run", "--", "true", now=T0).code == 2


def test_a_command_may_be_set_as_a_json_array(cli: Cli, home: Path) -> None:
    assert cli("config", "set", "handler", '["python3", "/srv/my agent.py", "--fast"]').code == 0
    import tomllib

    stored = tomllib.loads((home / "config.toml").read_text())["users"]["alice"]["handler"]
    assert stored == ["python3", "/srv/my agent.py", "--fast"]  # a TOML array, not a string
    got = json.loads(cli("config", "get", "handler", "--json").out)
    assert got["value"] == ["python3", "/srv/my agent.py", "--fast"]
    assert cli("config", "set", "handler", "python3 agent.py").code == 0  # split like a shell
    assert json.loads(cli("config", "get", "handler", "--json").out)["value"] == [
        "python3", "agent.py"]
    for bad in ('["python3", 1]', "[not json"):
        result = cli("config", "set", "handler", bad)
        assert result.code == 2 and "JSON array of strings" in result.err
