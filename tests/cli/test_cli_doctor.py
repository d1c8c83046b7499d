"""`doctor`: a healthy inbox passes; a damaged, exposed or stuck one fails, naming why."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentbox.rules.answer import Answer, Message
from agentbox.rules.policy import Policy
from support.clock import T0
from support.fixtures import Cli

NAMES = ["open", "integrity", "schema", "permissions", "wal", "lease", "running", "uncertain",
         "pending", "paused", "config"]


def doctor(cli: Cli, *argv: str, now: int = T0) -> tuple[int, dict[str, tuple[bool, str]]]:
    result = cli("doctor", "--json", *argv, now=now)
    doc = json.loads(result.out)
    assert doc["ok"] == (result.code == 0)
    return result.code, {c["name"]: (c["ok"], c["detail"]) for c in doc["checks"]}


def failed(checks: dict[str, tuple[bool, str]]) -> list[str]:
    return [name for name, (ok, _) in checks.items() if not ok]


def test_a_healthy_inbox_passes_every_check(cli: Cli, inbox_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert cli("run", "--", "sh", "-c", "cat >/dev/null", now=T0).code == 0
    code, checks = doctor(cli)
    assert (code, list(checks), failed(checks)) == (0, NAMES, [])
    assert checks["open"][1] == str(inbox_path)
    human = cli("doctor", now=T0)
    assert human.code == 0 and len(human.out.splitlines()) == len(NAMES)
    assert all(line.startswith("ok ") for line in human.out.splitlines())


def test_an_inbox_others_can_read_fails(cli: Cli, inbox_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    inbox_path.chmod(0o644)
    code, checks = doctor(cli)
    assert (code, failed(checks)) == (1, ["permissions"])
    assert "mode 0644" in checks["permissions"][1]
    line = next(x for x in cli("doctor", now=T0).out.splitlines() if "permissions" in x)
    assert line.startswith("FAIL  permissions")


def test_a_folder_others_can_write_into_fails(cli: Cli, inbox_path: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    inbox_path.parent.chmod(0o777)
    code, checks = doctor(cli)
    assert (code, failed(checks)) == (1, ["permissions"])
    inbox_path.parent.chmod(0o1777)  # sticky, like /tmp: others cannot replace the file
    assert doctor(cli)[0] == 0


def test_an_event_left_running_under_an_expired_lease_fails(cli: Cli, open_inbox: Any) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    with open_inbox() as store:
        generation = store.acquire("elsewhere:1:dead", T0, 60)
        assert generation is not None
        assert store.claim("elsewhere:1:dead", generation, T0, Policy()) is not None
    code, checks = doctor(cli, now=T0 + 30)
    assert code == 0 and "1 running under the live lease" in checks["running"][1]
    code, checks = doctor(cli, now=T0 + 61)
    assert (code, failed(checks)) == (1, ["running"])
    assert "1 event(s) stuck running past their lease (1)" in checks["running"][1]


def test_a_lease_held_by_a_process_that_is_gone_is_stale(cli: Cli, open_inbox: Any) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    holder = f"{socket.gethostname()}:{gone.stdout.strip()}:cafe"
    with open_inbox() as store:
        assert store.acquire(holder, T0, 600) is not None
    code, checks = doctor(cli, now=T0 + 10)
    assert (code, failed(checks)) == (1, ["lease"])
    assert checks["lease"][1].startswith(f"stale: held by {holder}")


def test_uncertain_dispatches_and_an_old_pending_event_fail(cli: Cli, open_inbox: Any) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    with open_inbox() as store:
        generation = store.acquire("w:1:x", T0, 60)
        assert generation is not None
        claimed = store.claim("w:1:x", generation, T0, Policy())
        assert claimed is not None
        assert store.finish("w:1:x", generation, T0, [e.id for e in claimed],
                            Answer(messages=(Message("hi", False),)))
        sent = store.claim_dispatch(T0, "at-most-once", 3600, 60)
        assert store.settle_dispatch(sent.key, "unknown", T0, "killed", attempt=1)  # type: ignore[union-attr]
        store.ingest("s", "2", "{}", T0)
    code, checks = doctor(cli, now=T0 + 600)
    assert (code, failed(checks)) == (1, ["uncertain"])
    code, checks = doctor(cli, "--max-pending-age", "5m", now=T0 + 600)
    assert failed(checks) == ["uncertain", "pending"]
    assert checks["pending"][1].startswith("oldest pending event is 10m old")


def test_a_corrupt_page_fails_the_integrity_check(cli: Cli, inbox_path: Path) -> None:
    assert cli("ingest", "--jsonl", "-", now=T0, stdin="".join(
        f'{{"source": "s", "source_id": "{n}", "payload": {{"text": "{"x" * 200}"}}}}\n'
        for n in range(2000))).code == 0
    size = inbox_path.stat().st_size
    assert size > 100 * 4096 and not Path(f"{inbox_path}-wal").exists()
    with open(inbox_path, "r+b") as fh:  # a page in the middle of the events table, overwritten
        fh.seek((size // 4096 // 2) * 4096)
        fh.write(b"\xff" * 4096)
    result = cli("doctor", now=T0)
    assert result.code == 1
    assert any(line.startswith("FAIL  integrity") for line in result.out.splitlines())
    assert "Traceback" not in result.err


def test_a_file_that_is_no_inbox_fails_to_open(cli: Cli, inbox_path: Path) -> None:
    inbox_path.parent.mkdir(parents=True)
    inbox_path.write_bytes(b"definitely not SQLite" * 100)
    code, checks = doctor(cli)
    assert (code, list(checks), failed(checks)) == (1, ["open", "config"], ["open"])
    assert "not an agentbox database" in checks["open"][1]


def test_no_inbox_is_as_healthy_as_an_empty_one(cli: Cli, home: Path) -> None:
    code, checks = doctor(cli)
    assert (code, failed(checks)) == (0, [])
    assert checks["permissions"][1] == "no file yet"
    assert not home.exists()


def test_a_config_with_a_typo_or_a_bad_value_fails(cli: Cli, home: Path) -> None:
    """Every other command only warns about an unknown key; doctor is where it fails."""
    assert cli("ingest", "s", "1", now=T0).code == 0
    home.mkdir(exist_ok=True)  # on PostgreSQL the inbox made no folder
    (home / "config.toml").write_text('max_atempts = 5\n[users.bob]\noutbox_gap = "soon"\n')
    code, checks = doctor(cli)
    assert (code, failed(checks)) == (1, ["config"])
    assert "unknown setting 'max_atempts' is ignored; did you mean 'max_attempts'?" in (
        checks["config"][1])
    assert "[users.bob]: outbox_gap: not a duration" in checks["config"][1]
    (home / "config.toml").write_text("max_attempts = 5\n")
    assert doctor(cli)[0] == 0


def test_a_bad_channel_or_source_table_fails_as_dispatch_and_serve_would(cli: Cli,
                                                                         home: Path) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[sources.gh]\nid_heder = "X-Id"\n'
                                      '[users.bob.channels.sms]\nmax_per_day = 0\n')
    code, checks = doctor(cli)
    assert (code, failed(checks)) == (1, ["config"])
    said = checks["config"][1]
    assert "[sources.gh]: unknown setting 'id_heder'" in said
    assert "[users.bob.channels.sms]: max_per_day" in said
    (home / "config.toml").write_text('[channels.sms]\ngap = "4h"\nquiet_hours = "22:00-07:00"\n')
    assert doctor(cli)[0] == 0
