"""A payload stored before the depth bound existed can break neither a batch nor a listing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agentbox.jsonutil import MAX_DEPTH
from agentbox.ledger.store import Store
from support.clock import T0
from support.fixtures import Proc
from support.store import plant


def _nested(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def test_a_deep_stored_payload_reaches_the_handler_as_text(
        home: Path, open_inbox: Callable[[], Store], agentbox_proc: Proc,
        tmp_path: Path) -> None:
    deep = _nested(980)  # what ingest stored before the bound: 980 levels parse, barely
    agentbox_proc("ingest", "chat", "ok", "--payload", '{"text":"hi"}',
                  env={"AGENTBOX_NOW": str(T0)})
    plant(open_inbox(), "legacy", "deep", deep, T0)  # as an older agentbox stored it
    seen = tmp_path / "batch.json"
    ran = agentbox_proc("run", "--", "sh", "-c", f"cat > {seen}",
                        env={"AGENTBOX_NOW": str(T0)})
    assert ran.returncode == 0, ran.stderr
    batch = json.loads(seen.read_text())
    payloads = {e["source_id"]: e["payload"] for e in batch["events"]}
    assert payloads == {"ok": {"text": "hi"}, "deep": deep}
    store = open_inbox()
    assert [store.event(i).status for i in (1, 2)] == ["done", "done"]  # type: ignore[union-attr]

    # the same payload, dead: every listing of it still answers
    plant(open_inbox(), "legacy", "deep-2", deep, T0)
    env = {"AGENTBOX_NOW": str(T0)}
    assert agentbox_proc("config", "set", "max_attempts", "1").returncode == 0
    assert agentbox_proc("run", "--", "sh", "-c", "exit 1", env=env).returncode == 1
    for argv in (["dead", "--json"], ["dead"], ["dead", "show", "3", "--json"],
                 ["dead", "show", "3"], ["status"], ["events", "show", "3", "--json"],
                 ["events", "list", "--json"], ["events"]):
        shown = agentbox_proc(*argv, env=env)
        assert shown.returncode == 0, (argv, shown.stderr)
    assert json.loads(agentbox_proc("dead", "show", "3", "--json", env=env).stdout)[
        "payload"] == deep
    assert MAX_DEPTH < 980
