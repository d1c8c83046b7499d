"""`run --watch`: real watchers on the real clock, real signals, a standby taking over.

Times are asserted loosely (the machine is shared): an ingest reaches the
handler within seconds, not within the figures the benchmark measures.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from support.handler import records, started_pids
from support.processes import alive, wait_for
from support.store import actions, event_state
from support.watching import Watcher

pytestmark = pytest.mark.slow
QUICK = 5.0  # seconds: "as soon as events are available", on a busy two-core machine


def handled(log: Path) -> list[int]:
    """Every event id the handler was given, in order, repeats included."""
    return [e["id"] for r in records(log) for e in r["batch"]["events"]]  # type: ignore[index]


def done(store: object, n: int, timeout: float = 60) -> None:
    """Wait until ``n`` events are done (the handler's record comes before the finish)."""
    wait_for(lambda: store.status().events["done"] == n,  # type: ignore[attr-defined]
             f"{n} event(s) to be done", timeout)


def stopped(pid: int) -> bool:
    """The process is stopped by a signal (state T)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def watching(store_open: Callable[[], object], watcher: Watcher) -> None:
    """Wait until ``watcher`` holds the lease."""
    store = store_open()
    wait_for(lambda: (lease := store.lease()) is not None  # type: ignore[attr-defined]
             and f":{watcher.pid}:" in lease.holder, "the watcher to take the lease")


def test_an_ingest_reaches_the_watching_handler_at_once(
        cli, start_watcher, handler, tmp_path, open_inbox) -> None:
    log = tmp_path / "log.jsonl"
    watcher = start_watcher("run", "--watch", "--", *handler, "--record", str(log))
    watching(open_inbox, watcher)
    store = open_inbox()
    for n in range(3):
        began = time.monotonic()
        assert cli("ingest", "chat", f"m{n}").code == 0
        wait_for(lambda n=n: len(records(log)) == n + 1, f"the handler to get m{n}", QUICK)
        assert time.monotonic() - began < QUICK
        done(store, n + 1)
    assert handled(log) == [1, 2, 3]  # three ingests, three runs: nothing waited for a tick
    assert watcher.stop(signal.SIGTERM) == 0
    lines = watcher.printed().splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == ["generation 1"] * 3
    assert all("done; queued 1 message(s)" in line for line in lines)
    lease = store.lease()
    assert lease is not None and lease.released  # on the way out
    assert "watching with the lease (generation 1)" in watcher.said()
    assert "stopped by SIGTERM" in watcher.said()


def test_a_timer_falling_due_starts_a_run(cli, start_watcher, handler, tmp_path,
                                          open_inbox) -> None:
    log = tmp_path / "log.jsonl"
    watcher = start_watcher("run", "--watch", "--json", "--", *handler, "--record", str(log))
    watching(open_inbox, watcher)
    assert cli("schedule", "add", "reminder", "--at", "+3s").code == 0
    due = open_inbox().timers()[0].due
    wait_for(lambda: records(log), "the timer's run", 3 + QUICK)
    [run] = records(log)
    [event] = run["batch"]["events"]  # type: ignore[index]
    assert event["source"] == "timer" and event["payload"]["scheduled_for"] == due
    assert 0 <= event["payload"]["late_by"] <= QUICK  # it slept until due, then ran
    done(open_inbox(), 1)
    assert watcher.stop(signal.SIGINT) == 0
    [line] = watcher.printed().splitlines()  # --json: one object per line, per run
    assert json.loads(line) == {
        "outcome": "done", "exit_code": 0, "generation": 1, "events": [event["id"]],
        "timers_fired": 1, "messages": 1, "approvals": 0, "timers": 0, "error": None,
        "events_after": [], "max_attempts": None, "paused": None}


def test_sigterm_mid_handler_gives_the_event_back_and_stops_its_whole_tree(
        cli, start_watcher, handler, tmp_path, open_inbox) -> None:
    assert cli("config", "set", "max_attempts", "1").code == 0  # its last attempt, even
    started = tmp_path / "started"
    watcher = start_watcher("run", "--watch", "--", *handler, "--started", str(started),
                            "--grandchild", "--sleep", "300")
    assert cli("ingest", "chat", "m1").code == 0
    pids = started_pids(started)
    assert watcher.stop(signal.SIGTERM) == 0
    wait_for(lambda: not any(alive(p) for p in pids), "the handler's tree to stop", 30)
    store = open_inbox()
    assert event_state(store, "m1") == ("pending", 0)  # the attempt given back: never dead
    assert actions(store, 1) == ["stored", "claimed", "interrupted"]
    assert "run interrupted by SIGTERM; the handler was stopped; 1 event(s) (1) back to " \
           "pending, the attempt given back" in watcher.printed()
    lease = store.lease()
    assert lease is not None and lease.released


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_the_standby_takes_over_and_nothing_is_done_twice(
        cli, start_watcher, handler, tmp_path, open_inbox, how) -> None:
    ttl = 3
    assert cli("config", "set", "lease_ttl", str(ttl)).code == 0
    log = tmp_path / "log.jsonl"
    argv = ["run", "--watch", "--", *handler, "--record", str(log)]
    first = start_watcher(*argv, name="first")
    watching(open_inbox, first)
    second = start_watcher(*argv, name="second")
    second.wait_said("standing by")
    store = open_inbox()
    assert cli("ingest", "chat", "m1").code == 0
    done(store, 1, QUICK)
    assert handled(log) == [1]
    first.proc.send_signal(getattr(signal, how))
    if how == "SIGKILL":
        first.proc.wait(timeout=60)
    else:
        wait_for(lambda: stopped(first.pid), "the first watcher to stall")
    held = store.lease()  # as the first left it: nobody renews it any more
    assert held is not None and f":{first.pid}:" in held.holder
    assert cli("ingest", "chat", "m2").code == 0
    done(store, 2, ttl + 3 * QUICK)
    claimed = next(e for e in store.story(2) if e.action == "claimed")
    assert claimed.generation == 2
    # Never while the first one's lease was live, and soon after it ended.
    assert held.until < claimed.at <= held.until + QUICK
    assert f":{second.pid}:" in store.lease().holder

    if how == "SIGSTOP":
        # Back from its stall: fenced out, standing by. Where the stop found it decides how
        # it learns the lease is gone (its renewal refused, or its next claim), not the end.
        first.proc.send_signal(signal.SIGCONT)
        first.wait_said("holds the lease (generation 2)")
        assert "lease lost" in first.said() + first.printed()
    assert cli("ingest", "chat", "m3").code == 0
    done(store, 3, QUICK)
    assert handled(log) == [1, 2, 3]  # each once
    if how == "SIGSTOP":
        assert first.stop() == 0
        assert first.printed().count("done") == 1
    assert second.stop() == 0
    assert [event_state(store, f"m{n}") for n in (1, 2, 3)] == [("done", 1)] * 3


def test_a_handler_that_cannot_start_is_refused_before_watching(
        cli, agentbox_proc, open_inbox) -> None:
    assert cli("ingest", "chat", "m1").code == 0
    done = agentbox_proc("run", "--watch", "--", "/nonexistent/agent")
    assert done.returncode == 1
    assert done.stderr == "agentbox: error: handler '/nonexistent/agent' not found\n"
    assert event_state(open_inbox(), "m1") == ("pending", 0)


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "--all-users", "--", "true"], "--all-users works with --watch"),
    (["run", "--watch", "--until-empty", "--", "true"], "--until-empty and --watch"),
    (["--user", "bob", "run", "--watch", "--all-users", "--", "true"], "leave out --user"),
    (["--db", "x.sqlite3", "run", "--watch", "--all-users", "--", "true"],
     "is a single inbox file"),
])
def test_watch_flags_that_do_not_go_together(cli, argv, says) -> None:
    done = cli(*argv)
    assert done.code == 2
    assert says in done.err
