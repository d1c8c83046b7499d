"""The Python API: agentbox.open and agentbox.handler, as a program embedding agentbox uses them."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentbox
from agentbox.errors import BadInput
from agentbox.handler import Approval, Batch, Event, Message, Reply, Timer, handler
from agentbox.location import is_url
from support.clock import T0
from support.fixtures import Proc
from support.processes import proc_env
from support.store import users_at

DOC = Path(__file__).parents[2] / "docs" / "python-api.md"


def test_open_finds_the_inbox_the_cli_uses(home: Path, place: str,
                                           agentbox_proc: Proc) -> None:
    with agentbox.open() as inbox:
        assert inbox.ingest("chat", "m-1", '{"text":"hi"}', T0).outcome == "stored"
    status = agentbox_proc("status", "--json", env={"AGENTBOX_NOW": str(T0)})
    assert json.loads(status.stdout)["events"]["pending"] == 1
    db = json.loads(status.stdout)["db"]
    assert db == place if is_url(place) else Path(db) == home / "inboxes" / "alice.sqlite3"


def test_open_takes_a_user_and_a_file(home: Path, place: str, tmp_path: Path) -> None:
    with agentbox.open(user="bob") as inbox:
        inbox.ingest("chat", "m-1", "{}", T0)
    assert users_at(place) == ["bob"]
    with agentbox.open(db=tmp_path / "own.sqlite3") as inbox:
        assert inbox.status().events["pending"] == 0
    with pytest.raises(BadInput):
        agentbox.open(user="../etc")


def batch(*payloads: dict[str, object]) -> Batch:
    return Batch("alice", 1, tuple(Event(n, "chat", f"m-{n}", p, 1, f"k-{n}")
                                   for n, p in enumerate(payloads, start=1)))


@handler
def echo(b: Batch) -> Reply | None:
    if not b.events:
        return None
    return Reply(messages=[Message(str(len(b.events)), urgent=True), "plain"],
                 approvals=[Approval("a-1", "4h", "deploy")],
                 timers=[Timer("later", 900, {"x": 1})])


def test_a_decorated_handler_is_still_a_function() -> None:
    reply = echo(batch({"text": "a"}, {"text": "b"}))
    assert reply is not None
    assert reply.document() == {
        "messages": [{"body": "2", "urgent": True}, {"body": "plain", "urgent": False}],
        "approvals": [{"id": "a-1", "expires_in": "4h", "action": "deploy"}],
        "timers": [{"name": "later", "in": 900, "payload": {"x": 1}}]}


def test_main_reads_a_batch_and_prints_the_reply() -> None:
    doc = {"user": "alice", "generation": 3, "events": [
        {"id": 1, "source": "chat", "source_id": "m-1", "payload": {}, "attempt": 1,
         "idempotency_key": "x-event-1"}]}
    out = io.StringIO()
    assert echo.run(io.BytesIO(json.dumps(doc).encode()), out) == 0
    assert json.loads(out.getvalue())["messages"][0] == {"body": "1", "urgent": True}
    silent = io.StringIO()
    assert echo.run(io.BytesIO(json.dumps({**doc, "events": []}).encode()), silent) == 0
    assert silent.getvalue() == ""


def test_a_reply_names_channels_and_usage_and_a_temporary_failure_exits_75(
        capsys: pytest.CaptureFixture[str]) -> None:
    from agentbox.handler import TemporaryFailure, Usage

    reply = Reply(messages=[Message("page", urgent=True, channel="pager")],
                  usage=Usage(tokens=1200, cost=0.02))
    assert reply.document()["messages"] == [{"body": "page", "urgent": True,
                                             "channel": "pager"}]
    assert json.loads(reply.to_json())["usage"] == {"tokens": 1200, "cost": 0.02}
    assert Reply(usage=Usage(tokens=5)).document()["usage"] == {"tokens": 5}

    def down(batch: object) -> Reply:
        raise TemporaryFailure("the model API answered 503")

    doc = json.dumps({"user": "u", "generation": 1, "events": []}).encode()
    out = io.StringIO()
    assert handler(down).run(io.BytesIO(doc), out) == 75
    assert out.getvalue() == "" and "503" in capsys.readouterr().err


@pytest.mark.parametrize("reply", [
    Reply(messages=[""]),
    Reply(approvals=[Approval("a", "soon", "x")]),
    Reply(timers=[Timer("t", 60, {"timer": "reserved"})]),
])
def test_a_reply_run_would_refuse_fails_in_the_handler(reply: Reply,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BadInput):
        reply.to_json()
    out = io.StringIO()
    doc = json.dumps({"user": "u", "generation": 1, "events": []}).encode()
    assert handler(lambda b: reply).run(io.BytesIO(doc), out) == 1
    assert out.getvalue() == ""
    assert "BadInput" in capsys.readouterr().err


AGENT = """
from agentbox.handler import Batch, Reply, handler

@handler
def answer(batch: Batch) -> Reply | None:
    texts = [e.payload["text"] for e in batch.events]
    if "boom" in texts:
        raise RuntimeError("the model refused")
    return Reply(messages=[" + ".join(texts)])

if __name__ == "__main__":
    answer.main()
"""


@pytest.mark.slow
def test_agentbox_run_drives_a_python_handler(home: Path, tmp_path: Path,
                                              agentbox_proc: Proc) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    env = {"AGENTBOX_NOW": str(T0)}
    for n, text in enumerate(["hello", "world"], start=1):
        agentbox_proc("ingest", "chat", f"m-{n}", "--payload", json.dumps({"text": text}), env=env)
    ran = agentbox_proc("run", "--", sys.executable, str(agent), env=env)
    assert ran.returncode == 0, ran.stderr
    outbox = json.loads(agentbox_proc("outbox", "--json", env=env).stdout)
    assert [m["body"] for m in outbox] == ["hello + world"]

    agentbox_proc("ingest", "chat", "m-3", "--payload", '{"text": "boom"}', env=env)
    failed = agentbox_proc("run", "--", sys.executable, str(agent), env=env)
    assert failed.returncode == 1
    with agentbox.open() as inbox:
        event = inbox.find("chat", "m-3")
        assert event is not None and event.status == "pending"
        assert "RuntimeError: the model refused" in (event.error or "")


def test_the_documented_examples_type_check(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 2
    for n, block in enumerate(blocks):
        (tmp_path / f"example_{n}.py").write_text(textwrap.dedent(block))
    src = Path(agentbox.__file__).parents[1]
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, sorted(
            tmp_path.glob("example_*.py")))], capture_output=True, text=True,
        env={**proc_env(tmp_path), "MYPYPATH": str(src)}, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_batch_carries_the_state_and_a_reply_writes_it() -> None:
    from agentbox.rules.answer import parse
    from agentbox.rules.state import Change

    doc = {"user": "alice", "generation": 3, "events": [], "state": {"n": 1},
           "state_version": 4}
    batch = Batch.from_json(json.dumps(doc))
    assert (batch.state, batch.state_version) == ({"n": 1}, 4)
    patched = parse(Reply(state_patch={"n": None, "m": 2}).to_json())
    assert patched.state == Change(patch={"n": None, "m": 2})
    assert parse(Reply(state={"a": [1]}).to_json()).state == Change(replace={"a": [1]})
    assert parse(Reply().to_json()).state is None
    with pytest.raises(BadInput, match="both"):
        Reply(state={}, state_patch={}).to_json()


def test_batch_step_outside_a_run_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.errors import UsageError
    from agentbox.handler import _run_context

    monkeypatch.delenv("AGENTBOX_RUN", raising=False)
    _run_context.cache_clear()
    batch = Batch(user="alice", generation=1, events=())
    called: list[object] = []
    with pytest.raises(UsageError, match="inside a run only"):
        batch.step("k", called.append)
    assert called == []
