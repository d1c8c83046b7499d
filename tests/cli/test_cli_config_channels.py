"""`config set|unset|get channels.NAME.KEY` and the channels `config show` lists: each
key checked as the setting it stands in for, and in force as `dispatch` reads it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from support.fixtures import Cli

pytestmark = pytest.mark.backend_free  # config.toml alone


def shown(cli: Cli) -> dict[str, tuple[Any, str]]:
    result = cli("config", "show", "--json")
    assert result.code == 0, result.err
    return {row["key"]: (row["value"], row["origin"]) for row in json.loads(result.out)
            if row["key"].startswith("channels.")}


def test_a_channel_is_written_one_key_at_a_time_and_shown_in_force(cli: Cli,
                                                                   home: Path) -> None:
    assert cli("config", "set", "--all-users", "channels.sms.sender",
               '["send-sms", "+15550100"]').code == 0
    assert cli("config", "set", "channels.sms.gap", "4h").code == 0
    assert cli("config", "set", "channels.sms.quiet_hours", "22:00-07:00").code == 0
    assert cli("config", "set", "channels.sms.max_per_day", "3").code == 0
    assert cli("config", "set", "channels.sms.urgent_in_quiet_hours", "false").code == 0
    assert cli("config", "set", "outbox_gap", "2h").code == 0
    assert tomllib.loads((home / "config.toml").read_text()) == {
        "channels": {"sms": {"sender": ["send-sms", "+15550100"]}},
        "users": {"alice": {"outbox_gap": "2h", "channels": {"sms": {
            "gap": "4h", "quiet_hours": "22:00-07:00", "max_per_day": 3,
            "urgent_in_quiet_hours": "false"}}}}}
    mine = "config [users.alice.channels.sms]"
    assert shown(cli) == {
        "channels.default.sender": (None, "setting sender"),
        "channels.default.gap": (7200, "setting outbox_gap"),
        "channels.default.delivery": ("at-least-once", "setting delivery"),
        "channels.default.quiet_hours": (None, "default"),
        "channels.default.urgent_in_quiet_hours": (True, "default"),
        "channels.default.max_per_day": (None, "default"),
        "channels.sms.sender": (["send-sms", "+15550100"], "config [channels.sms]"),
        "channels.sms.gap": (14400, mine),
        "channels.sms.delivery": ("at-least-once", "setting delivery"),
        "channels.sms.quiet_hours": ("22:00-07:00", mine),
        "channels.sms.urgent_in_quiet_hours": (False, mine),
        "channels.sms.max_per_day": (3, mine)}
    got = json.loads(cli("config", "get", "channels.sms.gap", "--json").out)
    assert (got["value"], got["origin"], got["written"]) == (14400, mine, "4h")
    unset = cli("config", "unset", "channels.sms.gap")
    assert unset.code == 0 and "in force for alice now: 7200 (setting outbox_gap)" in unset.out
    assert cli("config", "unset", "channels.sms.quiet_hours").code == 0
    assert cli("config", "unset", "channels.sms.max_per_day").code == 0
    assert cli("config", "unset", "channels.sms.urgent_in_quiet_hours").code == 0
    assert tomllib.loads((home / "config.toml").read_text())["users"]["alice"] == {
        "outbox_gap": "2h"}  # the emptied channel table goes with its last key
