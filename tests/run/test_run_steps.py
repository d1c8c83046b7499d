"""Journaled steps and the agent's state under real `agentbox run` processes.

The handlers here are small programs that call `agentbox step` as a process,
as a user's would; the clock is pinned with AGENTBOX_NOW where a lease must
expire, so no test waits out a lease.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from support.clock import T0, TTL
from support.processes import finish_proc, wait_for
from support.store import event_state

pytestmark = pytest.mark.slow

# A handler that runs STEPS journaled steps per event of its batch; each step's command
# appends "KEY STEP_KEY ATTEMPT" to the effects log first thing. With --wait-for FILE a
# generation-1 handler waits for FILE between its first and second step; --state answers
# with the generation as the state.
STEPPER = r'''
import json, os, subprocess, sys, time

args = sys.argv[1:]
effects, steps = args[0], int(args[1])
wait = args[args.index("--wait-for") + 1] if "--wait-for" in args else None
mode = args[args.index("--mode") + 1] if "--mode" in args else "at-least-once"
pause = args[args.index("--pause") + 1] if "--pause" in args else "0"
pidfile = args[args.index("--pid") + 1] if "--pid" in args else None
if pidfile:
    with open(pidfile, "a") as f:
        f.write(f"{os.getpid()}\n")
batch = json.load(sys.stdin)
for event in batch["events"]:
    for n in range(1, steps + 1):
        key = f"{event['idempotency_key']}-s{n}"
        effect = (f'echo "{key} $AGENTBOX_STEP_KEY $AGENTBOX_STEP_ATTEMPT" >> {effects}; '
                  f'sleep {pause}; echo "out {key}"')
        done = subprocess.run([sys.executable, "-m", "agentbox", "step", key, "--mode", mode,
                               "--", "sh", "-c", effect], stdout=subprocess.PIPE)
        if done.returncode != 0:
            sys.exit(done.returncode)
        assert done.stdout == f"out {key}\n".encode(), done.stdout
        if n == 1 and wait and batch["generation"] == 1:
            while not os.path.exists(wait):
                time.sleep(0.02)
print(json.dumps({"state_patch": {"by": batch["generation"],
                                  "seen": batch["state"].get("seen", 0) + 1}}))
'''


@pytest.fixture
def stepper(tmp_path: Path) -> list[str]:
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    return [sys.executable, str(script)]


def effects(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    return [(k, s, int(a)) for k, s, a in (line.split() for line in path.read_text().splitlines())]


def test_a_stalled_worker_is_refused_at_its_next_step_and_its_finish(
        cli, start_run, agentbox_proc, stepper, tmp_path, open_inbox) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    log, go = tmp_path / "effects", tmp_path / "go"
    stalled = start_run("--", *stepper, str(log), "2", "--wait-for", str(go), now=T0)
    wait_for(lambda: len(effects(log)) == 1, "the first step to run")
    stalled.send_signal(signal.SIGSTOP)
    try:
        takeover = agentbox_proc("run", "--", *stepper, str(log), "2",
                                 env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
        assert takeover.returncode == 0, takeover.stderr
    finally:
        stalled.send_signal(signal.SIGCONT)
    go.touch()
    code, _, err = finish_proc(stalled)
    assert code == 75, err
    assert "step '" in err and "not started: this run no longer holds the lease" in err
    assert "finish refused" in err
    # The first step ran once (the standby found it done), the second once, by the standby.
    keys = Counter(k for k, _, _ in effects(log))
    assert sorted(keys.values()) == [1, 1] and len(keys) == 2
    store = open_inbox()
    assert event_state(store, "m1") == ("done", 2)
    state = store.state()
    assert (state.version, state.value(), state.generation) == (1, {"by": 2, "seen": 1}, 2)


def test_at_most_once_parks_a_step_that_died_inside_until_it_is_resolved(
        cli, start_run, agentbox_proc, stepper, tmp_path, open_inbox) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    log = tmp_path / "effects"
    argv = ["--", *stepper, str(log), "1", "--mode", "at-most-once"]
    dying = start_run(*argv, "--pause", "300", now=T0)
    wait_for(lambda: len(effects(log)) == 1, "the step to run")
    dying.send_signal(signal.SIGKILL)
    finish_proc(dying)
    later = {"AGENTBOX_NOW": str(T0 + TTL + 1)}
    parked = agentbox_proc("run", *argv, env=later)
    assert parked.returncode == 1, parked.stderr
    assert "is uncertain" in parked.stderr
    listed = agentbox_proc("steps", "--state", "uncertain", "--json", env=later)
    [step] = json.loads(listed.stdout)
    key = effects(log)[0][0]
    assert (step["key"], step["status"], step["attempts"]) == (key, "uncertain", 1)
    resolved = agentbox_proc("steps", "resolve", key, "--done", "--output-file", "-",
                             stdin=f"out {key}\n", env=later)
    assert resolved.returncode == 0, resolved.stderr
    again = agentbox_proc("steps", "resolve", key, "--not-done", env=later)
    assert again.returncode == 3  # done now: left as it is
    after = agentbox_proc("run", *argv, env={"AGENTBOX_NOW": str(T0 + TTL + 2)})
    assert after.returncode == 0, after.stderr
    assert len(effects(log)) == 1  # never run again
    assert event_state(open_inbox(), "m1")[0] == "done"


@pytest.mark.parametrize("answer", ['{"state": 5}', '{"state": {}, "state_patch": {}}',
                                    "exit", "big"])
def test_a_failed_or_malformed_run_leaves_the_state_as_it_was(
        cli, agentbox_proc, tmp_path, open_inbox, answer) -> None:
    script = tmp_path / "answer.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\necho '{\"state\": {\"n\": 1}}'\n")
    script.chmod(0o755)
    assert cli("ingest", "chat", "m0", now=T0).code == 0
    assert agentbox_proc("run", "--", str(script)).returncode == 0
    before = open_inbox().state()
    assert before.version == 1
    body = {"exit": "echo '{\"state\": {\"n\": 2}}'; exit 3",
            "big": "echo '{\"state\": {\"n\": \"'$(head -c 300 /dev/zero | tr '\\0' x)'\"}}'"
            }.get(answer, f"echo '{answer}'")
    script.write_text(f"#!/bin/sh\ncat >/dev/null\n{body}\n")
    assert cli("config", "set", "max_state", "200").code == 0
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    failed = agentbox_proc("run", "--", str(script))
    assert failed.returncode == 1, failed.stderr
    assert open_inbox().state() == before
    shown = agentbox_proc("state", "--json")
    assert json.loads(shown.stdout)["version"] == 1


def test_state_set_waits_for_a_free_lease_and_is_kept_in_history(
        cli, agentbox_proc, open_inbox) -> None:
    store = open_inbox()
    assert store.acquire("someone", T0, TTL) == 1
    busy = agentbox_proc("state", "set", "--file", "-", stdin='{"a": 1}',
                         env={"AGENTBOX_NOW": str(T0 + 1)})
    assert busy.returncode == 75, busy.stderr
    done = agentbox_proc("state", "set", "--file", "-", stdin='{"a": 1}',
                         env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
    assert done.returncode == 0, done.stderr
    assert agentbox_proc("state", "set", "--file", "-", stdin="[1]").returncode == 65
    history = json.loads(agentbox_proc("state", "history", "--json").stdout)
    assert [(v["version"], v["state"], v["author"]) for v in history] == [
        (1, {"a": 1}, "operator")]
    assert store.history("state", 1)[0].action == "set"


def test_a_step_outside_a_run_is_a_usage_error(agentbox_proc, tmp_path) -> None:
    ran = tmp_path / "ran"
    outside = agentbox_proc("step", "k", "--", "touch", str(ran))
    assert outside.returncode == 2
    assert "inside a run only" in outside.stderr
    assert not ran.exists()


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _stepped(log: Path, worker: subprocess.Popen[str], before: int) -> bool:
    """Whether a step ran since ``before`` effects were logged, or the run is over."""
    return len(effects(log)) > before or worker.poll() is not None


KILL_LOOP = os.environ.get("AGENTBOX_KILL_LOOP", "16:10")  # events:kills (200:100 passes too)


def test_a_kill_loop_repeats_no_finished_step_and_loses_no_event(
        cli, start, agentbox_proc, stepper, tmp_path, open_inbox) -> None:
    """`run` or its handler SIGKILLed at random points: each step's effect appears once per
    key, except where a kill landed inside that very step (counted), every repeat under
    the same AGENTBOX_STEP_KEY; every event ends done."""
    n_events, n_kills = (int(n) for n in KILL_LOOP.split(":"))
    assert cli("config", "set", "max_attempts", "1000").code == 0
    assert cli("config", "set", "max_batch", "5").code == 0
    for n in range(n_events):
        assert cli("ingest", "chat", f"m{n}", now=T0).code == 0
    log, pids = tmp_path / "effects", tmp_path / "pids"
    argv = ["run", "--until-empty", "--", *stepper, str(log), "3", "--pause", "0.02",
            "--pid", str(pids)]
    chance = random.Random(int(os.environ.get("AGENTBOX_KILL_SEED", "22")))
    store = open_inbox()  # one connection, held for the whole loop
    now, kills = T0, 0
    for _ in range(n_kills):
        now += TTL + 1  # each run takes over the last one's lease at once
        handlers_before = len(_pids(pids))
        worker = start(*argv, now=now)
        before = len(effects(log))
        wait_for(functools.partial(_stepped, log, worker, before), "a step of this run")
        time.sleep(chance.uniform(0, 0.3))
        mine = _pids(pids)[handlers_before:]  # this run's handlers, not an earlier run's
        victims = [worker.pid]
        if chance.random() < 0.4 and mine:
            victims.insert(0, mine[-1])  # the handler; the run too, if it is gone already
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
                kills += 1
                break
        finish_proc(worker)
        if all(event_state(store, f"m{n}")[0] == "done" for n in range(n_events)):
            break
    final = agentbox_proc(*argv, env={"AGENTBOX_NOW": str(now + TTL + 1)}, timeout=600)
    assert final.returncode == 0, final.stderr
    assert [event_state(store, f"m{n}")[0] for n in range(n_events)] == ["done"] * n_events
    seen: dict[str, list[tuple[str, int]]] = {}
    for key, step_key, attempt in effects(log):
        seen.setdefault(key, []).append((step_key, attempt))
    assert len(seen) == 3 * n_events  # every step of every event ran
    repeated = 0
    for key, tries in seen.items():
        step = store.step(key)
        assert step is not None and step.status == "done"
        assert len({s for s, _ in tries}) == 1  # one AGENTBOX_STEP_KEY for every try
        attempts = [a for _, a in tries]
        assert attempts == sorted(set(attempts))  # each try ran the command once at most
        if len(tries) > 1:
            repeated += len(tries) - 1
            # every try but the last was killed inside: it never ended, or its command
            # died of the signal
            story = [(e.action, e.detail or "") for e in store.history("step", key)]
            ended = {d.split(";")[0]: d for a, d in story if a in ("done", "failed")}
            assert all(ended.get(f"attempt {a}", "exit 137").endswith("exit 137")
                       for a in attempts[:-1]), story
    print(f"kill loop: {n_events} events, {kills} kills, {3 * n_events} steps, "
          f"{repeated} repeat(s) of a step a kill landed inside")


PYTHON_STEPS = r'''
import os, sys
from agentbox.handler import Batch, Reply, handler

calls = sys.argv[1]

@handler
def agent(batch: Batch) -> Reply:
    def work(attempt):
        with open(calls, "a") as f:
            f.write(f"{attempt.key} {attempt.attempt}\n")
        return {"plan": "book", "n": len(batch.events)}
    plan = batch.step(f"event-{batch.events[0].id}/model", work, mode="at-most-once")
    if not os.path.exists(calls + ".go"):
        raise RuntimeError("the tool is down")
    return Reply(messages=[plan["plan"]], state={"plan": plan})

if __name__ == "__main__":
    agent.main()
'''


def test_batch_step_in_a_python_handler_is_not_called_again_on_the_retry(
        cli, agentbox_proc, tmp_path, open_inbox) -> None:
    script, calls = tmp_path / "agent.py", tmp_path / "calls"
    script.write_text(PYTHON_STEPS)
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    failed = agentbox_proc("run", "--", sys.executable, str(script), str(calls))
    assert failed.returncode == 1 and "the tool is down" in failed.stderr
    Path(f"{calls}.go").touch()
    done = agentbox_proc("run", "--", sys.executable, str(script), str(calls))
    assert done.returncode == 0, done.stderr
    [(key, attempt)] = [tuple(line.split()) for line in calls.read_text().splitlines()]
    store = open_inbox()
    assert key.startswith(store.instance_id()) and attempt == "1"
    assert store.state().value() == {"plan": {"plan": "book", "n": 1}}
    step = store.step("event-1/model")
    assert step is not None and json.loads(step.output or b"") == {"n": 1, "plan": "book"}
