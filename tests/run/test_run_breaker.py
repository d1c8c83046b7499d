"""The breaker and exit 75: a broken handler leaves at most two events dead and pauses
the inbox; a temporary failure never kills anything. Real handler processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support.clock import T0
from support.fixtures import Cli
from support.processes import wait_for
from support.store import actions

GOOD = "import json, sys; json.load(sys.stdin); print('{}')\n"


def outcome(cli: Cli, *argv: str, now: int) -> dict[str, object]:
    result = cli("run", "--json", "--", *argv, now=now)
    doc = json.loads(result.out)
    assert doc["exit_code"] == result.code
    return doc  # type: ignore[no-any-return]


def test_a_missing_script_kills_at_most_two_events_and_the_probe_closes_the_breaker(
        cli, start_watcher, tmp_path: Path, open_inbox) -> None:
    for n in range(20):
        assert cli("ingest", "chat", f"m{n}").code == 0
    assert cli("config", "set", "breaker_cooldown", "2s").code == 0
    agent = tmp_path / "agent.py"  # the script the watcher names does not exist yet
    watcher = start_watcher("run", "--watch", "--", sys.executable, str(agent))
    store = open_inbox()
    wait_for(lambda: store.status().paused is not None, "the breaker to open")
    state = store.status()
    assert state.paused is not None and state.paused.reason == "handler failing"
    assert state.events["dead"] <= 2
    assert state.events["done"] == 0
    shown = json.loads(cli("status", "--json").out)["paused"]
    assert shown["reason"] == "handler failing" and shown["until"] >= shown["since"]
    agent.write_text(GOOD)  # the fix is deployed; the probe after the cooldown finds it
    wait_for(lambda: store.status().events["done"] == 20 - state.events["dead"],
             "the probe and the rest to run")
    after = store.status()
    assert after.paused is None
    assert after.events["dead"] == state.events["dead"]
    assert after.events["done"] == 20 - state.events["dead"]
    assert "paused" in watcher.printed()
    watcher.stop()


def test_exit_75_over_50_runs_kills_nothing_gives_attempts_back_and_waits(
        cli, handler, open_inbox) -> None:
    assert cli("ingest", "chat", "a", now=T0).code == 0
    assert cli("ingest", "chat", "b", now=T0).code == 0
    store = open_inbox()
    last_claim: int | None = None
    outcomes: set[str] = set()
    now = T0
    for _ in range(50):
        doc = outcome(cli, *handler, "--exit", "75", now=now)
        outcomes.add(str(doc["outcome"]))
        if doc["outcome"] == "deferred":
            assert doc["exit_code"] == 75
            if last_claim is not None:
                assert now - last_claim >= 60  # the backoff held them back meanwhile
            last_claim = now
        else:
            assert doc["exit_code"] == 0, doc
        for event in (store.event(1), store.event(2)):
            assert event is not None
            assert (event.status, event.attempts) == ("pending", 0)
        now += 45
    assert {"deferred", "idle", "paused"} <= outcomes  # the backoff, then the breaker
    assert "deferred" in actions(store, 1)
    assert "dead" not in actions(store, 1) + actions(store, 2)


def test_a_budget_pauses_once_with_one_urgent_message_and_resume_lifts_it(
        cli, handler, open_inbox) -> None:
    spend = json.dumps({"usage": {"tokens": 600, "cost": 0.25}})
    assert cli("config", "set", "budget_tokens_per_day", "1000").code == 0
    assert cli("config", "set", "timezone", "UTC").code == 0
    day = T0 - T0 % 86400 + 3600  # 01:00 UTC of T0's day
    for n in range(4):
        assert cli("ingest", "chat", f"m{n}", now=day).code == 0
    assert outcome(cli, *handler, "--answer", spend, now=day)["outcome"] == "done"
    assert cli("ingest", "chat", "m9", now=day).code == 0
    assert outcome(cli, *handler, "--answer", spend, now=day + 1)["outcome"] == "done"
    paused = outcome(cli, *handler, "--answer", spend, now=day + 2)
    assert paused["outcome"] == "paused" and paused["exit_code"] == 0
    assert paused["runs"][0]["paused"]["reason"] == "token budget"
    assert paused["runs"][0]["paused"]["until"] == day - 3600 + 86400
    assert outcome(cli, *handler, now=day + 3)["outcome"] == "paused"
    assert 'agentbox_paused{user="alice",reason="token budget"} 1' in cli(
        "metrics", now=day + 3).out
    doctor = cli("doctor", "--json", now=day + 3)
    assert doctor.code == 1
    [check] = [c for c in json.loads(doctor.out)["checks"] if c["name"] == "paused"]
    assert not check["ok"] and "token budget" in check["detail"]
    [listed] = json.loads(cli("inboxes", "--json", now=day + 3).out)
    assert listed["paused"]["reason"] == "token budget"
    store = open_inbox()
    notices = [m for m in store.outbox(("held",)) if m.urgent]
    assert len(notices) == 1 and "1200 of 1000 tokens" in notices[0].body  # once per pause
    assert cli("ingest", "chat", "later", now=day + 4).code == 0  # ingest still stores
    assert json.loads(cli("resume", "--json", now=day + 5).out)["resumed"] is True
    assert outcome(cli, *handler, "--answer", spend, now=day + 6)["outcome"] == "done"
    assert store.status().paused is None  # waived for the rest of the day
    listed = json.loads(cli("usage", "--json", now=day + 7).out)
    assert listed["today"] == {"tokens": 1800, "cost": 0.75}
    assert [r["tokens"] for r in listed["runs"]] == [600, 600, 600]
    tomorrow = day + 86400
    assert outcome(cli, *handler, now=tomorrow)["outcome"] in ("done", "idle")
    assert len([m for m in store.outbox(("held",)) if m.urgent]) == 1


def test_until_empty_stops_at_a_pause(cli, handler) -> None:
    for n in range(3):
        assert cli("ingest", "chat", f"m{n}", now=T0).code == 0
    assert cli("config", "set", "breaker_runs", "2").code == 0
    assert outcome(cli, *handler, "--exit", "3", now=T0)["outcome"] == "failed"
    assert outcome(cli, *handler, "--exit", "3", now=T0)["outcome"] == "failed"
    doc = json.loads(cli("run", "--until-empty", "--json", "--", *handler, now=T0).out)
    assert [r["outcome"] for r in doc["runs"]] == ["paused"]
    assert doc["exit_code"] == 0
