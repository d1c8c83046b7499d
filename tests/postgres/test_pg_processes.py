"""Real processes on one PostgreSQL database: hosts racing, workers killed and stalled.

Every process here is a real `agentbox` (or Python) process with its own
connection, as separate hosts would be. The clock is pinned with
AGENTBOX_NOW where expiry is the point, so no test waits out a lease; where
a test needs a session to be waiting on a lock, it asks the server
(``pg_blocking_pids``) instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.backends.postgres.schema import SCHEMA_VERSION
from agentbox.errors import Busy
from agentbox.ledger.store import Store
from agentbox.location import open_store
from agentbox.rules.outbox import CLAIM_GRACE
from support.clock import T0, TTL
from support.handler import records, started_pids
from support.processes import alive, finish_proc, wait_for
from support.store import outbox_states, say

pytestmark = [pytest.mark.slow, pytest.mark.postgres_only]
SEND_TIMEOUT = 60
Start = Callable[..., subprocess.Popen[str]]
Inbox = Callable[..., Store]

# A sender that records its call, then waits for a release file when told to.
SENDER = textwrap.dedent("""
    import json, os, sys, time
    body = sys.stdin.read()
    env = os.environ
    with open(env["SENDER_LOG"], "a") as fh:
        fh.write(json.dumps({"pid": os.getpid(), "body": body,
                             "key": env["AGENTBOX_DISPATCH_KEY"],
                             "attempt": env["AGENTBOX_DISPATCH_ATTEMPT"]}) + "\\n")
    release, give_up = env.get("SENDER_WAIT_FOR"), time.monotonic() + 120
    while release and not os.path.exists(release) and time.monotonic() < give_up:
        time.sleep(0.05)
""")


class Sender:
    def __init__(self, folder: Path) -> None:
        self.script, self.log, self.release = (folder / "sender.py", folder / "sent.jsonl",
                                               folder / "release")
        self.script.write_text(SENDER)
        self.argv = [sys.executable, str(self.script)]

    def env(self, now: int, wait: bool = False) -> dict[str, str]:
        return {"AGENTBOX_NOW": str(now), "SENDER_LOG": str(self.log),
                **({"SENDER_WAIT_FOR": str(self.release)} if wait else {})}

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def sender(tmp_path: Path) -> Sender:
    return Sender(tmp_path)


def waiting_on(holder: Store, observer: Store) -> int:
    """How many sessions wait for a lock ``holder``'s session holds, as ``observer`` sees
    (the holder's own transaction would keep showing it the same activity snapshot)."""
    row = observer.engine.conn.execute(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
        (holder.engine.conn.info.backend_pid,)).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def inbox_locked(store: Store) -> Iterator[None]:
    """Hold the store's inbox lock, as a writer in the middle of its transaction does."""
    with store._locked():
        yield


def actions(store: Store, event_id: int) -> list[str]:
    return [e.action for e in store.story(event_id)]


def test_runs_started_together_on_many_hosts_share_one_lease(
        cli: Any, start: Start, handler: list[str], tmp_path: Path, open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    go, log = tmp_path / "go", tmp_path / "log.jsonl"
    procs = [start("run", "--", *handler, "--record", str(log), "--wait-for", str(go),
                   env={"AGENTBOX_NOW": str(T0)}) for _ in range(5)]
    try:
        wait_for(lambda: sum(p.poll() is not None for p in procs) == 4,
                 "four runs to find the lease taken")
    finally:
        go.touch()
    results = [finish_proc(p) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 75, 75, 75, 75], results
    assert all("held by another worker" in err for code, _, err in results if code == 75)
    assert len(records(log)) == 1
    store = open_inbox()
    event = store.find("chat", "m1")
    assert event is not None and (event.status, event.attempts) == ("done", 1)
    assert store.lease() is not None and store.lease().generation == 1  # type: ignore[union-attr]


def test_workers_on_many_hosts_handle_every_event_exactly_once(
        cli: Any, start: Start, agentbox_proc: Any, handler: list[str], tmp_path: Path,
        open_inbox: Inbox) -> None:
    log = tmp_path / "log.jsonl"
    lines = [json.dumps({"source": "chat", "source_id": f"m{n}", "payload": {"n": n}})
             for n in range(40)]
    assert cli("ingest", "--jsonl", "-", stdin="\n".join(lines[:20]) + "\n").code == 0
    workers = [start("run", "--until-empty", "--", *handler, "--record", str(log))
               for _ in range(3)]
    # More deliveries arrive while the workers race for the lease and claim.
    late = agentbox_proc("ingest", "--jsonl", "-", stdin="\n".join(lines[20:]) + "\n")
    assert late.returncode == 0, late.stderr
    for worker in workers:
        code, _, err = finish_proc(worker, timeout=120)
        assert code in (0, 75), err
    store = open_inbox()
    for _ in range(20):  # a worker that found the lease taken left the rest to others
        if store.status().events["pending"] == 0:
            break
        finish = agentbox_proc("run", "--until-empty", "--", *handler, "--record", str(log))
        assert finish.returncode in (0, 75), finish.stderr
    assert store.status().events == {"pending": 0, "running": 0, "done": 40, "dead": 0}
    handled = [e["source_id"] for r in records(log) for e in r["batch"]["events"]]
    assert sorted(handled) == sorted(f"m{n}" for n in range(40))  # each once, none lost
    for n in range(40):
        event = store.find("chat", f"m{n}")
        assert event is not None and actions(store, event.id).count("finished") == 1


def test_a_locked_inbox_holds_up_its_own_writers_only(
        cli: Any, start: Start, agentbox_proc: Any, handler: list[str],
        open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "a1").code == 0
    assert cli("-u", "bob", "ingest", "chat", "b1").code == 0
    holder, observer = open_inbox(), open_inbox()
    with inbox_locked(holder):
        # Another inbox in the same tables does not wait at all...
        bob = agentbox_proc("-u", "bob", "run", "--", *handler)
        assert bob.returncode == 0, bob.stderr
        # ...nor does an ingest into the locked inbox: ingest takes no inbox lock.
        ingested = agentbox_proc("ingest", "chat", "a2")
        assert ingested.returncode == 0, ingested.stderr
        alice = start("run", "--", *handler)
        wait_for(lambda: waiting_on(holder, observer) == 1,
                 "alice's run to wait for her inbox lock")
        assert alice.poll() is None
    code, out, err = finish_proc(alice)
    assert code == 0, err
    assert "2 event(s)" in out
    assert open_inbox("bob").status().events["done"] == 1


def test_a_lock_held_past_the_lock_timeout_is_busy(open_inbox: Inbox, pg_url: str) -> None:
    impatient = open_store(pg_url, "alice", busy_timeout=0.5)
    try:
        with inbox_locked(open_inbox()):
            with pytest.raises(Busy) as waited:
                impatient.acquire("W", T0, TTL)
            assert waited.value.exit_code == 75
            assert "database stayed busy" in str(waited.value)
            assert impatient.ingest("chat", "a1", "{}", T0).outcome == "stored"  # never held up
        assert impatient.acquire("W", T0, TTL) == 1
    finally:
        impatient.close()


def test_two_dispatchers_started_together_send_each_message_once(
        open_inbox: Inbox, start: Start, sender: Sender) -> None:
    say(open_inbox(), T0, "a", "b", "c")
    procs = [start("dispatch", "--timeout", f"{SEND_TIMEOUT}s", "--", *sender.argv,
                   env=sender.env(T0, wait=True)) for _ in range(2)]
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs), "one dispatcher to end")
        wait_for(lambda: len(sender.calls()) >= 1, "the sender's marker")
        loser = next(p for p in procs if p.poll() is not None)
        code, out, err = finish_proc(loser)
        assert (code, out) == (0, "")
        assert "nothing to send" in err and "1 dispatch(es) in flight" in err
    finally:
        sender.release.touch()
    assert [finish_proc(p)[0] for p in procs if p is not loser] == [0]
    assert [c["body"] for c in sender.calls()] == ["a\n\nb\n\nc"]
    assert outbox_states(open_inbox()) == ["sent", "sent", "sent"]


def test_a_killed_dispatcher_is_resent_once_under_the_same_key(
        open_inbox: Inbox, start: Start, agentbox_proc: Any, sender: Sender) -> None:
    say(open_inbox(), T0, "deploy finished")
    proc = start("dispatch", "--timeout", f"{SEND_TIMEOUT}s", "--", *sender.argv,
                 env=sender.env(T0, wait=True))
    wait_for(lambda: len(sender.calls()) == 1, "the sender's marker")
    proc.kill()
    finish_proc(proc)
    first = sender.calls()[0]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(first["pid"], signal.SIGKILL)
    assert outbox_states(open_inbox()) == ["sending"]
    deadline = T0 + SEND_TIMEOUT + CLAIM_GRACE
    early = agentbox_proc("dispatch", "--", *sender.argv, env=sender.env(deadline))
    assert early.returncode == 0 and len(sender.calls()) == 1, early.stderr
    late = agentbox_proc("dispatch", "--", *sender.argv, env=sender.env(deadline + 1))
    assert late.returncode == 0, late.stderr
    again = agentbox_proc("dispatch", "--", *sender.argv, env=sender.env(deadline + 10_000))
    assert again.returncode == 0, again.stderr
    calls = sender.calls()
    assert [(c["key"], c["attempt"], c["body"]) for c in calls] == [
        (first["key"], "1", "deploy finished"), (first["key"], "2", "deploy finished")]
    assert outbox_states(open_inbox()) == ["sent"]


def test_a_killed_run_is_retried_by_another_host_once_the_lease_expires(
        cli: Any, start: Start, agentbox_proc: Any, handler: list[str], tmp_path: Path,
        open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    started, log = tmp_path / "started", tmp_path / "log.jsonl"
    worker = start("run", "--", *handler, "--record", str(log), "--started", str(started),
                   "--sleep", "300", env={"AGENTBOX_NOW": str(T0)})
    pids = started_pids(started)
    worker.send_signal(signal.SIGKILL)
    assert finish_proc(worker)[0] == -signal.SIGKILL
    wait_for(lambda: not alive(pids[0]), "the handler to die with its parent")
    store = open_inbox()
    event = store.find("chat", "m1")
    assert event is not None and (event.status, event.attempts) == ("running", 1)
    live = agentbox_proc("run", "--", *handler, env={"AGENTBOX_NOW": str(T0 + TTL // 2)})
    assert live.returncode == 75, live.stderr  # the dead worker's lease still stands
    after = agentbox_proc("run", "--", *handler, "--record", str(log),
                          env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
    assert after.returncode == 0, after.stderr
    first, retry = records(log)
    assert retry["batch"]["generation"] == first["batch"]["generation"] + 1
    assert [e["attempt"] for e in retry["batch"]["events"]] == [2]
    event = store.find("chat", "m1")
    assert event is not None and (event.status, event.attempts) == ("done", 2)
    assert actions(store, event.id) == ["stored", "claimed", "abandoned", "claimed",
                                        "finished"]


def test_a_stalled_run_is_fenced_out_after_another_host_takes_over(
        cli: Any, start: Start, agentbox_proc: Any, handler: list[str], tmp_path: Path,
        open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    started, go = tmp_path / "started", tmp_path / "go"
    stalled = start("run", "--", *handler, "--started", str(started), "--wait-for", str(go),
                    env={"AGENTBOX_NOW": str(T0)})
    started_pids(started)
    stalled.send_signal(signal.SIGSTOP)
    try:
        takeover = agentbox_proc("run", "--", *handler, env={"AGENTBOX_NOW": str(T0 + TTL + 1)})
        assert takeover.returncode == 0, takeover.stderr
        assert "generation 2: 1 event(s)" in takeover.stdout
    finally:
        stalled.send_signal(signal.SIGCONT)
    go.touch()
    code, out, err = finish_proc(stalled)
    assert code == 75
    assert "finish refused: this worker no longer holds the lease (generation 1)" in err
    assert "generation 1: finish refused by the lease fence" in out
    store = open_inbox()
    event = store.find("chat", "m1")
    assert event is not None and (event.status, event.attempts) == ("done", 2)
    assert actions(store, event.id).count("finished") == 1
    assert [m.body for m in store.outbox(("held", "sent"))] == ["handled m1"]


STOPS_IN_A_TRANSACTION = textwrap.dedent("""
    import os, signal, sys
    from agentbox.location import open_store
    store = open_store(sys.argv[1], "alice")
    store.instance_id()
    with store._locked():
        print("locked", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
""")


def test_a_process_stopped_inside_a_transaction_does_not_hold_the_inbox_for_good(
        cli: Any, agentbox_proc: Any, handler: list[str], pg_url: str,
        open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "m1").code == 0
    stopped = subprocess.Popen([sys.executable, "-c", STOPS_IN_A_TRANSACTION, pg_url],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert stopped.stdout is not None and stopped.stdout.readline() == "locked\n"
        wait_for(lambda: Path(f"/proc/{stopped.pid}/stat").read_text().split()[2] == "T",
                 "the process to stop")
        began = time.monotonic()
        # The run waits on the lock until the server ends the idle transaction.
        done = agentbox_proc("run", "--", *handler, timeout=120)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - began < 60
    finally:
        stopped.send_signal(signal.SIGCONT)
        stopped.kill()
        stopped.communicate(timeout=30)
    event = open_inbox().find("chat", "m1")
    assert event is not None and event.status == "done"


def test_hosts_opening_a_new_database_at_once_migrate_it_once(
        agentbox_proc: Any, start: Start, pg_url: str, open_inbox: Inbox) -> None:
    procs = [start("-u", f"user{n}", "ingest", "chat", "m1") for n in range(6)]
    results = [finish_proc(p) for p in procs]
    assert [code for code, _, _ in results] == [0] * 6, results
    store = open_inbox("user0")
    assert store.engine.conn.execute("SELECT version FROM migrations ORDER BY version"
                                     ).fetchall() == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    assert store.engine.conn.execute("SELECT COUNT(*) FROM inboxes").fetchone() == (6,)
    assert sorted(r[0] for r in store.engine.conn.execute(
        "SELECT source_id FROM events").fetchall()) == ["m1"] * 6
