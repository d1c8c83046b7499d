"""`prune`, `run`'s daily prune, `inboxes` / `status --all-users` and `metrics`."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.clock import T0
from support.fixtures import Cli

DAY = 86400
LATER = T0 + 31 * DAY
HANDLER = ["--", "sh", "-c", "cat >/dev/null; echo '{\"messages\": [\"ok\"]}'"]


def ingest_and_finish(cli: Cli, keys: list[str], now: int = T0) -> None:
    for key in keys:
        assert cli("ingest", "hook", key, "--payload", f'{{"k": "{key}"}}', now=now).code == 0
    assert cli("run", "--until-empty", *HANDLER, now=now).code == 0


def test_prune_keeps_refusing_redeliveries_of_what_it_pruned(cli: Cli) -> None:
    ingest_and_finish(cli, ["a", "b", "c"])
    assert cli("ingest", "hook", "newest", now=T0 + 1).code == 0
    dry = cli("prune", "--dry-run", "--json", now=LATER)
    assert dry.code == 0 and json.loads(dry.out)["events"] == 3
    assert json.loads(cli("events", "--json", now=LATER).out)[0]["source_id"] == "a"
    result = cli("prune", "--json", now=LATER)
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["events"], report["messages"], report["complete"]) == (3, 0, True)
    assert [e["source_id"] for e in json.loads(cli("events", "--json", now=LATER).out)] \
        == ["newest"]
    again = cli("ingest", "hook", "a", "--payload", '{"k": "a"}', "--json", now=LATER)
    assert (again.code, json.loads(again.out)["outcome"]) == (0, "duplicate")
    changed = cli("ingest", "hook", "a", "--payload", '{"k": "changed"}', now=LATER)
    assert changed.code == 3 and changed.out.startswith("conflict: hook/a is event 1")
    assert cli("prune", now=LATER).out.startswith("pruned 0 done event(s)")


def test_the_dedupe_window_and_keep_settings_come_from_config(cli: Cli) -> None:
    ingest_and_finish(cli, ["a", "b"])
    assert cli("config", "set", "keep_done", "90d").code == 0
    assert json.loads(cli("prune", "--json", now=LATER).out)["events"] == 0
    assert cli("config", "set", "keep_done", "7d").code == 0
    assert cli("config", "set", "dedupe_window", "0").code == 0
    assert json.loads(cli("prune", "--json", now=LATER).out)["events"] == 2  # the newest too
    assert cli("ingest", "hook", "a", "--json", now=LATER).code == 0  # forgotten at once


def test_run_prunes_at_most_once_a_day(cli: Cli) -> None:
    ingest_and_finish(cli, ["a", "b"])
    first = json.loads(cli("run", "--json", *HANDLER, now=LATER).out)
    assert first["prune"]["events"] == 2 and first["prune"]["complete"]
    assert cli("ingest", "hook", "c", now=LATER).code == 0
    ingest_and_finish(cli, [], now=LATER + 1)
    assert json.loads(cli("run", "--json", *HANDLER, now=LATER + DAY - 1).out)["prune"] is None
    assert json.loads(cli("run", "--json", *HANDLER, now=LATER + DAY).out)["prune"] \
        is not None
    assert cli("config", "set", "auto_prune", "false").code == 0
    assert json.loads(cli("run", "--json", *HANDLER, now=LATER + 9 * DAY).out)["prune"] \
        is None
    human = cli("run", *HANDLER, now=LATER + 9 * DAY)
    assert "pruned" not in human.out


def test_run_says_what_it_pruned(cli: Cli) -> None:
    ingest_and_finish(cli, ["a", "b"])
    result = cli("run", *HANDLER, now=LATER)
    ran, pruned = result.out.splitlines()
    assert ran == "generation 3: nothing to do"
    assert pruned.startswith("pruned 2 done event(s), 0 sent message(s)")


@pytest.mark.sqlite_file  # files, a corrupt one among them, and their sizes
def test_inboxes_lists_every_user_and_creates_nothing(cli: Cli, home: Path,
                                                      tree_snapshot: Any) -> None:
    assert cli("inboxes", "--json").out.strip() == "[]"
    assert not home.exists()
    ingest_and_finish(cli, ["a"])
    assert cli("-u", "bob", "ingest", "s", "1", now=T0 + 5).code == 0
    (home / "inboxes" / "zed.sqlite3").write_bytes(b"not a database at all")
    before = tree_snapshot(home)
    docs = json.loads(cli("inboxes", "--json", now=T0 + 9).out)
    assert tree_snapshot(home) == before
    assert [d["user"] for d in docs] == ["alice", "bob", "zed"]
    alice, bob, zed = docs
    assert alice["events"] == {"pending": 0, "running": 0, "done": 1, "dead": 0}
    assert alice["outbox"]["held"] == 1 and alice["last_run"] == T0
    assert bob["events"]["pending"] == 1 and bob["last_activity"] == T0 + 5
    assert bob["bytes"] == (home / "inboxes" / "bob.sqlite3").stat().st_size
    assert bob["error"] is None and "not an agentbox database" in zed["error"]
    same = cli("status", "--all-users", "--json", now=T0 + 9)
    assert json.loads(same.out) == docs
    assert "zed: unreadable" in cli("inboxes", now=T0 + 9).err


def test_all_users_does_not_mix_with_one_named_database(cli: Cli, tmp_path: Path,
                                                        one_error: Any) -> None:
    result = cli("--db", str(tmp_path / "x.sqlite3"), "inboxes")
    assert result.code == 2
    assert "data folder" in one_error(result.err)


SAMPLE = re.compile(
    r'(agentbox_[a-z_]+)\{user="[A-Za-z0-9._-]+"(,state="[a-z]+"|,reason="[a-z ]*")?\} (\d+)')


def strictly_parsed(text: str) -> dict[tuple[str, str, str], float]:
    """Every sample by (name, user, state), after checking the grammar line by line."""
    assert text.endswith("\n")
    declared: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split()[2]
            assert current not in declared, f"{current} declared twice"
            declared[current] = set()
        elif line.startswith("# TYPE "):
            assert line == f"# TYPE {current} gauge"
        else:
            match = SAMPLE.fullmatch(line)
            assert match and match.group(1) == current, line
    samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation
        for sample in family.samples:
            key = (sample.name, sample.labels["user"], sample.labels.get("state", ""))
            assert key not in samples
            samples[key] = sample.value
    return samples


def test_metrics_are_prometheus_text(cli: Cli) -> None:
    ingest_and_finish(cli, ["a", "b"])
    assert cli("ingest", "hook", "late", now=T0 + 50).code == 0
    assert cli("schedule", "add", "digest", "--every", "1d", now=T0 + 60).code == 0
    result = cli("metrics", now=T0 + 100)
    assert (result.code, result.err) == (0, "")
    samples = strictly_parsed(result.out)
    assert samples[("agentbox_events", "alice", "done")] == 2
    assert samples[("agentbox_events", "alice", "pending")] == 1
    assert samples[("agentbox_outbox_messages", "alice", "held")] == 1
    assert samples[("agentbox_oldest_pending_age_seconds", "alice", "")] == 50
    assert samples[("agentbox_lease_generation", "alice", "")] == 2
    assert samples[("agentbox_last_run_timestamp_seconds", "alice", "")] == T0
    assert samples[("agentbox_next_timer_timestamp_seconds", "alice", "")] == T0 + 60
    assert samples[("agentbox_inbox_bytes", "alice", "")] > 0
    assert samples[("agentbox_paused", "alice", "")] == 0  # not paused, no reason


def test_metrics_of_every_user_to_a_file(cli: Cli, tmp_path: Path) -> None:
    ingest_and_finish(cli, ["a"])
    assert cli("-u", "bob", "ingest", "s", "1", now=T0).code == 0
    out = tmp_path / "agentbox.prom"
    out.write_text("old")
    result = cli("metrics", "--all-users", "--output", str(out), now=T0 + 10)
    assert (result.code, result.out, result.err) == (0, "", "")
    samples = strictly_parsed(out.read_text())
    assert {user for _, user, _ in samples} == {"alice", "bob"}
    assert ("agentbox_last_run_timestamp_seconds", "bob", "") not in samples  # never ran
    assert samples[("agentbox_lease_generation", "bob", "")] == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # node_exporter runs as another user
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == ["agentbox.prom"]


def test_metrics_into_a_missing_folder_is_one_error(cli: Cli, tmp_path: Path,
                                                    one_error: Any) -> None:
    result = cli("metrics", "--output", str(tmp_path / "no" / "m.prom"), now=T0)
    assert result.code == 1
    assert "cannot write" in one_error(result.err.splitlines()[-1] + "\n")


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_auto_prune_is_a_switch(cli: Cli, one_error: Any, value: str) -> None:
    result = cli("config", "set", "auto_prune", value)
    assert result.code == 2
    assert "true or false" in one_error(result.err)
