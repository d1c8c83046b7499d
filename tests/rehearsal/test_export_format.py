"""The export: what a window holds, read through the store on either backend, and the
format read back, refusing what it cannot stand behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rehearsal.traffic import FORMAT, VERSION, lines, read, record
from agentbox.rules.answer import parse as parse_answer
from agentbox.rules.policy import Policy
from support.fixtures import Cli

T0 = 1767225600
HEADER = {"format": FORMAT, "version": VERSION, "user": "alice", "exported_at": T0}


def _finish_with(store: Store, now: int, answer: dict[str, object]) -> None:
    generation = store.acquire("w", now, 120)
    assert generation is not None
    claimed = store.claim("w", generation, now, Policy())
    assert claimed
    assert store.finish("w", generation, now, [e.id for e in claimed],
                        parse_answer(json.dumps(answer)))
    store.release("w", generation, now)


def test_a_window_holds_what_arrived_was_answered_and_sent_in_it(store: Store) -> None:
    store.ingest("chat", "early", {"n": 1}, T0)
    _finish_with(store, T0, {"messages": ["first"], "approvals": [
        {"id": "a1", "expires_in": "1h", "action": "pay"}]})
    claimed = store.claim_dispatch(T0 + 10, "at-least-once", 3600, 60)
    assert not hasattr(claimed, "held")
    store.settle_dispatch(claimed.key, "sent", T0 + 11, attempt=1)  # type: ignore[union-attr]
    assert store.answer_approval("a1", "no", T0 + 100) == "no"
    store.ingest("chat", "late", {"n": 2}, T0 + 500)
    every = record(store, "alice", None, Policy(), T0 + 600)
    assert [(a.source, a.key) for a in every.arrivals] == [("chat", "early"), ("chat", "late")]
    assert [(a.at, a.approval, a.reply) for a in every.answers] == [(T0 + 100, "a1", "no")]
    assert [(s.at, s.channel, s.body, s.state) for s in every.sends] == [
        (T0 + 10, "default", "first", "sent")]
    window = record(store, "alice", None, Policy(), T0 + 600, since=T0 + 50, until=T0 + 500)
    assert (window.arrivals, [a.approval for a in window.answers], window.sends) == (
        [], ["a1"], [])
    text = list(lines(every))
    back = read(text, "export")
    assert (back.arrivals, back.answers, back.sends) == (every.arrivals, every.answers,
                                                        every.sends)
    assert [json.loads(t).get("type") for t in text] == [None, "event", "send", "answer",
                                                         "event"]


def test_export_writes_stdout_or_a_file_alike(cli: Cli, tmp_path: Path) -> None:
    assert cli("ingest", "chat", "m1", "--payload", '{"text": "hi"}', now=T0).code == 0
    out = cli("export", now=T0 + 5)
    assert out.code == 0
    path = tmp_path / "out.jsonl"
    assert cli("export", "-o", str(path), now=T0 + 5).out == ""
    assert path.read_text() == out.out
    header = json.loads(out.out.splitlines()[0])
    assert (header["user"], header["exported_at"], header["since"]) == ("alice", T0 + 5, None)
    assert cli("export", "--since", str(T0 + 1), now=T0 + 5).out.count("\n") == 1


@pytest.mark.parametrize(("text", "says"), [
    ("", "empty"),
    ('{"format": "other"}', "not an agentbox traffic header"),
    (json.dumps({**HEADER, "version": VERSION + 1}), "newer"),
    (json.dumps(HEADER) + '\n{"type": "mystery", "at": 1}', "line 2: unknown record type"),
    (json.dumps(HEADER) + '\n{"type": "event", "at": "soon", "source": "a", "key": "b", '
     '"payload": {}}', "line 2: 'at'"),
    (json.dumps(HEADER) + '\n{"type": "event", "at": 1, "source": "a", "key": "b", '
     '"payload": []}', "line 2: 'payload' must be a JSON object"),
    (json.dumps(HEADER) + '\n{"type": "answer", "at": 1, "approval": "a", "reply": "maybe"}',
     "line 2: 'reply'"),
    (json.dumps(HEADER) + "\n[1]", "line 2: a line is one JSON object"),
    (json.dumps(HEADER) + '\n{"type": "send", "at": 99999999999999, "channel": "c", '
     '"body": "b"}', "line 2: 'at' is"),
])
def test_a_file_it_cannot_stand_behind_is_refused(text: str, says: str) -> None:
    with pytest.raises(BadInput, match=f"^week.jsonl.*{says}"):
        read(text.splitlines(), "week.jsonl")


def test_fields_it_does_not_know_are_left_alone() -> None:
    text = [json.dumps({**HEADER, "later": 1}),
            json.dumps({"type": "send", "at": 5, "channel": "c", "body": "b", "new": True}),
            json.dumps({"type": "event", "at": 3, "source": "s", "key": "k",
                        "payload": {"b": 1, "a": 2}})]
    traffic = read(text, "f")
    assert traffic.sends[0].state == "sent" and traffic.arrivals[0].payload == '{"a":2,"b":1}'
    assert traffic.end == T0
