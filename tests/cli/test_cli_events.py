"""`events [list]` and `events show`: every event, filtered, paged, and told in full."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli


def listed(cli: Cli, *argv: str, now: int = T0) -> list[dict[str, Any]]:
    result = cli("events", "list", "--json", *argv, now=now)
    assert (result.code, result.err) == (0, ""), result.err
    docs: list[dict[str, Any]] = json.loads(result.out)
    return docs


@pytest.fixture
def mixed(cli: Cli, make_dead: Any) -> dict[str, int]:
    """An inbox with one dead event and three pending ones arriving an hour apart."""
    [dead] = make_dead(["poison"], T0)
    got = {"poison": dead}
    for n, key in enumerate(("a", "b", "c")):
        result = cli("ingest", "chat" if key != "b" else "github", key, "--payload",
                     f'{{"n": {n}}}', "--json", now=T0 + (n + 1) * 3600)
        got[key] = json.loads(result.out)["id"]
    return got


def test_events_list_filters_and_pages(cli: Cli, mixed: dict[str, int]) -> None:
    assert [d["id"] for d in listed(cli)] == sorted(mixed.values())
    assert [d["source_id"] for d in listed(cli, "--state", "pending")] == ["a", "b", "c"]
    assert [d["source_id"] for d in listed(cli, "-s", "dead", "-s", "pending", "-n", "2")] \
        == ["b", "c"]
    assert [d["source_id"] for d in listed(cli, "--source", "chat")] == ["a", "c"]
    now = T0 + 3 * 3600 + 10
    assert [d["source_id"] for d in listed(cli, "--since", "2h", now=now)] == ["b", "c"]
    assert [d["source_id"] for d in listed(cli, "--until", str(T0 + 2 * 3600))] \
        == ["poison", "a"]
    assert [d["source_id"] for d in listed(cli, "--before", str(mixed["b"]))] \
        == ["poison", "a"]
    same = cli("events", "--json", "--state", "pending", now=T0)
    assert json.loads(same.out) == listed(cli, "--state", "pending")


def test_a_listed_event_is_the_object_show_prints(cli: Cli, mixed: dict[str, int]) -> None:
    [item] = [d for d in listed(cli) if d["source_id"] == "poison"]
    shown = json.loads(cli("events", "show", str(mixed["poison"]), "--json", now=T0).out)
    dead_shown = json.loads(cli("dead", "show", str(mixed["poison"]), "--json", now=T0).out)
    assert shown == dead_shown
    assert {k: v for k, v in shown.items() if k != "history"} == item
    assert item["status"] == "dead" and item["error"] == "handler exploded"
    assert [h["action"] for h in shown["history"]] == ["stored", "claimed", "failed", "dead"]
    pending = json.loads(cli("events", "show", str(mixed["b"]), "--json", now=T0).out)
    assert (pending["payload"], pending["status"]) == ({"n": 1}, "pending")


def test_an_unknown_id_is_bad_input(cli: Cli, mixed: dict[str, int], one_error: Any) -> None:
    result = cli("events", "show", "999", now=T0)
    assert result.code == 65
    assert one_error(result.err) == "agentbox: error: no event with id 999"


@pytest.mark.parametrize("argv", [["--state", "finished"], ["--since", "yesterday"],
                                  ["--until", "1x"], ["--limit", "0"], ["--before", "0"]])
def test_bad_filters_are_usage_errors(cli: Cli, mixed: dict[str, int], one_error: Any,
                                      argv: list[str]) -> None:
    result = cli("events", "list", *argv, now=T0)
    assert result.code == 2
    one_error(result.err)


def test_human_tables_fit_80_columns(cli: Cli, mixed: dict[str, int],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    long_key = "delivery-" + "0123456789abcdef" * 6  # wider than the terminal: folded
    assert cli("ingest", "a-rather-long-source-name", long_key, now=T0).code == 0
    uuid_key = "delivery-72b1c3e0-0f5c-11ef-8a0a-0242ac120002"
    assert cli("ingest", "github", uuid_key, now=T0).code == 0
    for argv in (["events"], ["events", "show", str(mixed["poison"])], ["inboxes"]):
        result = cli(*argv, now=T0)
        assert result.code == 0, result.err
        widest = max(len(line) for line in result.out.splitlines())
        assert widest <= 80, (argv, result.out)
    table = cli("events", now=T0).out
    assert uuid_key in table and "1970-01-12T13:46:40Z" in table  # keys and times stay whole
