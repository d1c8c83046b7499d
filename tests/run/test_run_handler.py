"""`agentbox run` and its handler: what goes in, what comes back, what is recorded.

The CLI runs in-process here; every handler is a real child process.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from agentbox.ledger.store import Store
from agentbox.location import is_url
from agentbox.process import MAX_STDOUT
from agentbox.rules.keys import idempotency_key
from support.clock import T0
from support.fixtures import Cli
from support.handler import records, started_pids
from support.processes import alive, wait_for
from support.store import actions, event_state


def home_db() -> str:
    """The database the test's processes use: the PostgreSQL URL, or '' for files."""
    return os.environ.get("AGENTBOX_DB", "")


def ingest(cli: Cli, *ids: str, payload: str = "{}", now: int = T0) -> None:
    for source_id in ids:
        assert cli("ingest", "chat", source_id, "--payload", payload, now=now).code == 0


def held(store: Store) -> list[tuple[str, bool]]:
    return [(m.body, m.urgent) for m in store.outbox(("held",))]


def test_one_run_hands_the_batch_and_records_the_answer(cli, handler, tmp_path, open_inbox):
    ingest(cli, "m1", "m2", payload='{"text": "hi"}')
    log = tmp_path / "log.jsonl"
    result = cli("run", "--", *handler, "--record", str(log), now=T0)
    assert result.code == 0, result.err
    assert result.out.startswith("generation 1: 2 event(s) (1, 2) done; queued 1 message(s)")
    [seen] = records(log)
    batch, env = seen["batch"], seen["env"]
    store = open_inbox()
    instance = store.instance_id()
    assert batch == {"user": "alice", "generation": 1, "events": [
        {"id": i, "source": "chat", "source_id": f"m{i}", "payload": {"text": "hi"},
         "attempt": 1, "idempotency_key": idempotency_key(instance, i)} for i in (1, 2)],
        "state": {}, "state_version": 0}
    assert env["AGENTBOX_USER"] == "alice"
    assert env["AGENTBOX_GENERATION"] == "1"
    assert env["AGENTBOX_DB"] == (store.location if is_url(store.location)
                                  else str(Path(store.location).resolve()))
    assert event_state(store, "m1") == ("done", 1)
    assert held(store) == [("handled m1,m2", False)]
    lease = store.lease()
    assert lease is not None and lease.released  # released, not left to expire


def test_the_idempotency_key_is_stable_across_retries_and_unique_per_inbox(
        cli, handler, tmp_path, home):
    log = tmp_path / "log.jsonl"
    ingest(cli, "m1")
    assert cli("run", "--", *handler, "--record", str(log), "--exit", "3", now=T0).code == 1
    assert cli("run", "--", *handler, "--record", str(log), now=T0).code == 0
    assert cli("--user", "bob", "ingest", "chat", "m1", now=T0).code == 0
    assert cli("--user", "bob", "run", "--", *handler, "--record", str(log), now=T0).code == 0
    first, retry, bob = (r["batch"]["events"][0] for r in records(log))
    assert (first["attempt"], retry["attempt"], bob["attempt"]) == (1, 2, 1)
    if not is_url(home_db()):  # each file numbers its own events: the ids may meet
        assert first["id"] == bob["id"] == 1
    assert first["idempotency_key"] == retry["idempotency_key"]
    assert first["idempotency_key"] != bob["idempotency_key"]


def test_empty_output_is_silence(cli, handler, open_inbox):
    ingest(cli, "m1")
    result = cli("run", "--", *handler, "--answer", "", now=T0)
    assert result.code == 0, result.err
    store = open_inbox()
    assert event_state(store, "m1") == ("done", 1)
    assert held(store) == []


def test_the_answer_lands_whole_in_the_finish(cli, handler, open_inbox):
    ingest(cli, "m1")
    answer = {"messages": ["routine", {"body": "the server is down", "urgent": True}],
              "approvals": [{"id": "refund-7", "expires_in": "4h", "action": "refund 7"}],
              "timers": [{"name": "check-back", "in": "15m", "payload": {"about": "m1"}}]}
    result = cli("run", "--", *handler, "--answer", json.dumps(answer), now=T0)
    assert result.code == 0, result.err
    store = open_inbox()
    assert held(store) == [("routine", False), ("the server is down", True)]
    [approval] = store.approvals(T0)
    assert (approval.id, approval.action, approval.expires_at) == ("refund-7", "refund 7",
                                                                   T0 + 4 * 3600)
    timers = {t.name: t for t in store.timers()}
    assert timers["check-back"].due == T0 + 900
    assert json.loads(timers["check-back"].payload) == {"about": "m1"}
    assert timers["expire:refund-7"].due == T0 + 4 * 3600
    # Written by the finish of generation 1 (that nothing half-applies is shown below).
    queued = store.engine.conn.execute("SELECT DISTINCT generation FROM outbox").fetchall()
    assert queued == [(1,)]
    assert actions(store, store.find("chat", "m1").id)[-1] == "finished"


def test_a_follow_up_cannot_replace_a_schedule_and_nothing_half_applies(cli, handler, open_inbox):
    assert cli("schedule", "add", "digest", "--every", "1d", now=T0).code == 0
    assert cli("schedule", "tick", now=T0).code == 0
    answer = {"messages": ["hello"],
              "approvals": [{"id": "a1", "expires_in": "1h", "action": "x"}],
              "timers": [{"name": "digest", "in": "5m"}]}
    result = cli("run", "--", *handler, "--answer", json.dumps(answer), now=T0)
    assert result.code == 1
    assert "cannot replace timer 'digest': it is a recurring schedule" in result.err
    store = open_inbox()
    assert event_state(store, "digest@1000000", source="timer") == ("pending", 1)
    assert held(store) == [] and store.approvals(T0) == []
    assert {t.name: t.every for t in store.timers()} == {"digest": 86400}


@pytest.mark.parametrize(("answer", "why"), [
    ("not json", "rejected: the answer is not valid JSON"),
    ("[1, 2]", "must be a JSON object, not an array"),
    ('{"messages": [""]}', "messages[0] must be a non-empty string"),
    ('{"timers": [{"name": "t", "in": "soon"}]}', "timers[0].in must be a duration"),
    ('{"approvals": [{"id": "a", "expires_in": "1h"}]}', "approvals[0].action"),
    ('{"reply": "hi"}', "unknown keys: reply"),
])
def test_a_malformed_answer_fails_the_run(cli, handler, open_inbox, answer, why):
    ingest(cli, "m1")
    result = cli("run", "--", *handler, "--answer", answer, "--stderr", "trace", now=T0)
    assert result.code == 1
    relayed, said = result.err.splitlines()
    assert relayed == "handler: trace"  # the handler's stderr, as it was written
    assert said.startswith("agentbox: error: handler output rejected") and why in said
    store = open_inbox()
    event = store.find("chat", "m1")
    assert (event.status, event.attempts) == ("pending", 1)
    assert why in event.error and event.error.endswith("stderr: trace")
    assert f"it began {answer[:120]!r}" in event.error  # what the handler printed
    assert held(store) == []


def test_an_answer_over_the_output_bound_fails_the_run(cli, open_inbox):
    ingest(cli, "m1")
    flood = ("import sys; sys.stdin.read(); "
             f"sys.stdout.write('{{\"messages\": [\"' + 'x' * {MAX_STDOUT} + '\"]}}')")
    result = cli("run", "--", sys.executable, "-c", flood, now=T0)
    assert result.code == 1
    assert f"handler output is larger than {MAX_STDOUT} bytes" in result.err
    store = open_inbox()
    assert event_state(store, "m1") == ("pending", 1)
    assert held(store) == []


def test_a_failing_handler_records_its_stderr_tail_in_whole_lines(cli, handler, open_inbox):
    ingest(cli, "m1")
    lines = [f"line {n} " + "y" * (1 + n % 37) for n in range(1000)]
    result = cli("run", "--", *handler, "--exit", "4", "--stderr", "\n".join(lines), now=T0)
    assert result.code == 1
    assert result.out == "generation 1: event 1 will retry (attempt 1 of 3 failed)\n"
    assert result.err.splitlines()[:1000] == [f"handler: {line}" for line in lines]
    event = open_inbox().find("chat", "m1")
    assert event.status == "pending"
    kept = event.error.removeprefix("handler exited 4: ").splitlines()
    assert kept == lines[-len(kept):]  # the last lines, none cut in the middle
    assert 50 < len(kept) < 1000 and len(event.error) < 5000  # bounded, not the whole stream


def test_a_single_overlong_stderr_line_keeps_its_end(cli, handler, open_inbox):
    ingest(cli, "m1")
    result = cli("run", "--", *handler, "--exit", "4", "--stderr", "x" * 10_000 + "END",
                 now=T0)
    assert result.code == 1
    assert result.out == "generation 1: event 1 will retry (attempt 1 of 3 failed)\n"
    event = open_inbox().find("chat", "m1")
    assert event.error.startswith("handler exited 4: …xxx") and event.error.endswith("END")
    assert len(event.error) < 5000


def test_a_handler_that_overruns_its_timeout_is_stopped(cli, handler, tmp_path, open_inbox):
    ingest(cli, "m1")
    started = tmp_path / "started"
    result = cli("run", "--timeout", "1", "--", *handler, "--started", str(started),
                 "--grandchild", "--sleep", "120", now=T0)
    assert result.code == 1
    assert "handler timed out after 1s" in result.err
    pids = started_pids(started)
    wait_for(lambda: not any(alive(pid) for pid in pids), "the handler group to stop")
    assert event_state(open_inbox(), "m1") == ("pending", 1)


def test_the_timeout_setting_comes_from_config(cli, handler, open_inbox):
    ingest(cli, "m1")
    assert cli("config", "set", "handler_timeout", "1").code == 0
    result = cli("run", "--", *handler, "--sleep", "120", now=T0)
    assert result.code == 1 and "timed out after 1s" in result.err


def test_a_missing_handler_is_reported_before_anything_is_claimed(cli, open_inbox, tmp_path):
    ingest(cli, "m1")
    for argv in (["no-such-agentbox-handler"], [str(tmp_path / "nowhere" / "agent")]):
        result = cli("run", "--", *argv, now=T0)
        assert result.code == 1
        assert result.err.count("\n") == 1 and "not found" in result.err
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho {}\n")
    result = cli("run", "--", str(script), now=T0)
    assert result.code == 1 and "is not executable" in result.err
    store = open_inbox()
    assert event_state(store, "m1") == ("pending", 0)
    assert store.lease() is None


def test_the_handler_comes_from_a_flag_or_the_config(cli, handler, open_inbox):
    assert cli("run", now=T0).code == 2
    assert cli("run", "--handler", "x", "--", "y", now=T0).code == 2
    ingest(cli, "m1")
    assert cli("config", "set", "handler", shlex.join([*handler, "--answer", ""])).code == 0
    assert cli("run", now=T0).code == 0
    assert event_state(open_inbox(), "m1") == ("done", 1)
    ingest(cli, "m2")
    result = cli("run", "--handler", "no-such-agentbox-handler --x", now=T0)
    assert result.code == 1 and "'no-such-agentbox-handler'" in result.err


def test_nothing_to_do_still_ticks_and_releases(cli, handler, open_inbox):
    result = cli("run", "--json", "--", *handler, now=T0)
    assert result.code == 0
    doc = json.loads(result.out)
    assert doc["outcome"] == "idle" and doc["runs"][0]["events"] == []
    assert cli("schedule", "add", "ping", "--at", str(T0 + 60), now=T0).code == 0
    result = cli("run", "--", *handler, now=T0 + 60)
    assert result.code == 0
    assert "1 event(s) (1) done" in result.out and "(1 timer(s) fired)" in result.out
    lease = open_inbox().lease()
    assert lease is not None and lease.released and lease.until == T0 + 60


def test_a_lease_held_elsewhere_exits_75_and_claims_nothing(cli, handler, open_inbox, tmp_path):
    ingest(cli, "m1")
    store = open_inbox()
    assert store.acquire("other-host:1:abcd", T0, 120) == 1
    assert cli("schedule", "add", "ping", "--at", str(T0), now=T0).code == 0
    log = tmp_path / "log.jsonl"
    result = cli("run", "--", *handler, "--record", str(log), now=T0 + 5)
    assert result.code == 75
    assert "held by another worker (other-host:1:abcd, generation 1" in result.err
    assert records(log) == []
    assert event_state(store, "m1") == ("pending", 0)
    assert store.find("timer", f"ping@{T0}") is not None  # the scheduler pass still ran
    assert store.lease().holder == "other-host:1:abcd"


def test_until_empty_repeats_runs_and_stops_at_a_failure(cli, handler, open_inbox):
    assert cli("config", "set", "max_batch", "1").code == 0
    ingest(cli, "m1", "m2", "m3")
    result = cli("run", "--until-empty", "--json", "--", *handler, now=T0)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert [r["outcome"] for r in doc["runs"]] == ["done", "done", "done", "idle"]
    assert [r["generation"] for r in doc["runs"]] == [1, 2, 3, 4]
    ingest(cli, "m4", "m5")
    ingest(cli, "bad", payload='{"poison": 1}')
    ingest(cli, "m6")
    result = cli("run", "--until-empty", "--", *handler, "--fail-on", "poison", now=T0)
    assert result.code == 1
    assert len(result.out.splitlines()) == 3  # m4, m5, then the poison run
    assert "cannot handle poison" in result.err
    store = open_inbox()
    assert [event_state(store, s) for s in ("m4", "m5", "bad", "m6")] == [
        ("done", 1), ("done", 1), ("pending", 1), ("pending", 0)]


def test_a_poison_event_goes_dead_and_the_healthy_one_is_done(cli, handler, open_inbox):
    ingest(cli, "poison", payload='{"poison": true}')
    ingest(cli, "healthy", payload='{"text": "ok"}')
    codes = [cli("run", "--", *handler, "--fail-on", "poison", now=T0 + n).code
             for n in range(5)]
    assert codes == [1, 1, 1, 0, 0]
    store = open_inbox()
    assert event_state(store, "poison") == ("dead", 3)
    assert event_state(store, "healthy") == ("done", 2)
    poison = store.find("chat", "poison")
    assert actions(store, poison.id) == ["stored", "claimed", "failed", "claimed", "failed",
                                         "claimed", "failed", "dead"]
    shown = cli("dead", "show", str(poison.id), "--json")
    assert shown.code == 0
    story = json.loads(shown.out)
    assert story["status"] == "dead" and "cannot handle poison" in story["error"]
    assert [h["action"] for h in story["history"]].count("failed") == 3
    assert held(store) == [("handled healthy", False)]


def test_answers_and_expiries_come_back_as_approval_events(cli, handler, tmp_path, open_inbox):
    ingest(cli, "m1")
    answer = {"approvals": [{"id": "r1", "expires_in": "1h", "action": "refund 1"},
                            {"id": "r2", "expires_in": "1h", "action": "refund 2"}]}
    assert cli("run", "--", *handler, "--answer", json.dumps(answer), now=T0).code == 0
    assert cli("approve", "answer", "r1", "yes", now=T0 + 60).code == 0
    log = tmp_path / "log.jsonl"
    assert cli("run", "--", *handler, "--record", str(log), now=T0 + 2 * 3600).code == 0
    [seen] = records(log)
    got = {e["source_id"]: e["payload"] for e in seen["batch"]["events"]}
    assert {k: (v["approval"], v["answer"]) for k, v in got.items()} == {
        "r1": ("r1", "yes"), "r2": ("r2", "expired")}
    assert got["r2"]["late_by"] == 3600 and got["r2"]["action"] == "refund 2"
    assert all(e["source"] == "approval" for e in seen["batch"]["events"])
    assert os.environ.get("AGENTBOX_NOW") == str(T0 + 2 * 3600)
