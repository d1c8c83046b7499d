"""Rehearsing a live inbox's own traffic: the same handler sends the same thing at the
same time, a changed one shows its changes, and the live inbox is never written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import is_url
from support.fixtures import Cli
from support.rehearsal import END, T0, agent, live_day, stepping_agent

TABLES = ("events", "history", "outbox", "dispatches", "timers", "approvals", "inboxes")


def _export(cli: Cli, tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path / "week.jsonl"
    result = cli("export", "--output", str(out), now=END)
    assert result.code == 0, result.err
    return out, [json.loads(line) for line in out.read_text().splitlines()]


def test_the_live_handler_sends_what_was_sent_when_it_was(cli: Cli, tmp_path: Path) -> None:
    argv = agent(tmp_path)
    live = live_day(cli, argv)
    assert len(live) == 4  # hello; the held three merged at the gap; urgent; the expiry
    path, records = _export(cli, tmp_path)
    assert records[0]["format"] == "agentbox-traffic" and records[0]["version"] == 1
    assert records[0]["user"] == "alice" and records[0]["settings"]["outbox_gap"] == 3600
    kinds = [r["type"] for r in records[1:]]
    assert kinds.count("event") == 6  # five chats and the reminder's firing
    assert kinds.count("answer") == 1 and kinds.count("send") == 4
    assert [r["at"] for r in records[1:]] == sorted(r["at"] for r in records[1:])
    assert [(r["at"], r["body"]) for r in records if r.get("type") == "send"] == live

    result = cli("rehearse", "--from", str(path), "--json", "--", *argv, now=END + 60)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert doc["ok"] and doc["differences"] == 0
    assert [p["mark"] for p in doc["sends"]] == ["="] * 4
    assert [(p["rehearsed"]["at"], p["rehearsed"]["body"]) for p in doc["sends"]] == live
    assert all(p["rehearsed"]["channel"] == "default" for p in doc["sends"])
    totals = doc["totals"]
    assert (totals["runs"], totals["failed"], totals["dead"], totals["sends"]) == (8, 0, 0, 4)
    assert (totals["approvals"], totals["approved"], totals["expired"]) == (2, 1, 1)
    assert totals["timers_fired"] >= 2  # the reminder and the approval's expiry
    assert all(p["held"] for p in doc["promises"])


def test_a_changed_handler_shows_its_changes_and_fails_on_diff(cli: Cli,
                                                               tmp_path: Path) -> None:
    argv = agent(tmp_path)
    live_day(cli, argv)
    path, _ = _export(cli, tmp_path)
    changed = [*argv, "you wrote "]
    plain = cli("rehearse", "--from", str(path), "--json", "--", *changed, now=END)
    assert plain.code == 0, plain.err  # every run finished: differences alone do not fail
    doc = json.loads(plain.out)
    assert [p["mark"] for p in doc["sends"]] == ["≠", "≠", "≠", "="]
    first = doc["sends"][0]
    assert (first["recorded"]["body"], first["rehearsed"]["body"]) == (
        "you said hello", "you wrote hello")
    strict = cli("rehearse", "--from", str(path), "--fail-on-diff", "--", *changed, now=END)
    assert strict.code == 1
    assert "3 difference(s) in what was sent" in strict.out
    assert "you wrote hello" in strict.out and "≠" in strict.out


def _files(place: str) -> dict[Path, bytes]:
    """Every file of the data folder, byte for byte (none on PostgreSQL)."""
    return {} if is_url(place) else {p: p.read_bytes() for p in Path(place).glob("*")}


def _state(rows: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {table: sorted(rows(f"SELECT * FROM {table}"), key=repr) for table in TABLES}


def test_rehearse_never_writes_the_live_inbox(cli: Cli, tmp_path: Path, rows: Any,
                                             place: str) -> None:
    argv = agent(tmp_path)
    live_day(cli, argv)
    before = _state(rows)
    files = _files(place)
    status = cli("status", "--json", now=END).out
    result = cli("rehearse", "--since", str(T0), "--faults", "kill=0.3,duplicate=0.3",
                 "--seed", "4", "--json", "--", *argv, now=END)
    assert result.code == 0, result.err
    assert json.loads(result.out)["traffic"]["arrivals"] == 6
    assert _state(rows) == before
    assert _files(place) == files
    assert cli("status", "--json", now=END).out == status


def test_the_traffic_comes_from_one_place(cli: Cli, tmp_path: Path) -> None:
    argv = agent(tmp_path)
    neither = cli("rehearse", "--", *argv)
    assert neither.code == 2 and "--from FILE" in neither.err
    both = cli("rehearse", "--from", "x.jsonl", "--since", "1d", "--", *argv)
    assert both.code == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "agentbox-traffic", "version": 9}\n')
    newer = cli("rehearse", "--from", str(bad), "--", *argv)
    assert newer.code == 65 and "line 1" in newer.err and "version 9" in newer.err
    faults = cli("rehearse", "--from", str(bad), "--faults", "kill=2", "--", *argv)
    assert faults.code == 2 and "probability" in faults.err


def test_the_settings_in_force_are_rehearsed_and_a_change_is_said(cli: Cli,
                                                                  tmp_path: Path) -> None:
    argv = agent(tmp_path)
    live = live_day(cli, argv)
    path, _ = _export(cli, tmp_path)
    assert cli("config", "set", "outbox_gap", "10m").code == 0
    result = cli("rehearse", "--from", str(path), "--json", "--", *argv, now=END)
    assert result.code == 0, result.err
    assert "outbox_gap is 600 here; the export was made under 3600" in result.err
    doc = json.loads(result.out)
    assert doc["settings_differ"] == [{"setting": "outbox_gap", "exported": 3600,
                                       "in_force": 600}]
    rehearsed = [(p["rehearsed"]["at"], p["rehearsed"]["body"]) for p in doc["sends"]
                 if p["rehearsed"]]
    assert rehearsed[:2] == [(T0, "you said hello"), (T0 + 600, "you said deploy?")]
    assert len(rehearsed) > len(live) and doc["differences"] > 0


def test_a_step_killed_inside_is_named_as_repeated(cli: Cli, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The text report's totals count the steps, and a step whose work ran twice is named."""
    live_day(cli, agent(tmp_path))
    path, _ = _export(cli, tmp_path)
    argv = stepping_agent(tmp_path)
    effects = tmp_path / "emails.log"
    monkeypatch.setenv("EFFECTS", str(effects))
    for seed in range(8):
        effects.unlink(missing_ok=True)
        result = cli("rehearse", "--from", str(path), "--faults", "kill=0.6", "--seed",
                     str(seed), "--", *argv, now=END)
        assert result.code == 0, result.err
        if "repeated: step" in result.out:
            break
    assert "repeated: step 'mail-" in result.out, result.out
    assert "its work saw the same AGENTBOX_STEP_KEY each time" in result.out
    assert "uncertain; " in result.out and "tries run); usage: 0 tokens, cost 0" in result.out
    assert "done steps ran once" in result.out
