"""The CLI on PostgreSQL: every command, how the database is chosen, and what goes wrong.

The ``home`` fixture of this folder sets AGENTBOX_DB to a fresh schema, so
``cli`` (in-process) and ``agentbox_proc`` (a real process) both use it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentbox.backends.postgres.schema import SCHEMA_VERSION
from agentbox.backends.postgres.url import parse, with_schema
from agentbox.ledger.store import Store
from agentbox.location import POSTGRES_EXTRA, open_store
from support.clock import T0
from support.postgres import server_url

pytestmark = pytest.mark.postgres_only

Inbox = Callable[..., Store]


def doc(result: Any) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_every_command_works_on_postgresql(cli: Any, handler: list[str], pg_url: str,
                                           tmp_path: Path, open_inbox: Inbox) -> None:
    assert cli("config", "set", "max_attempts", "1").code == 0
    assert cli("ingest", "chat", "poison", "--payload", '{"poison": true}', now=T0).code == 0
    ran = cli("run", "--json", "--", *handler, "--fail-on", "poison", now=T0)
    assert ran.code == 1 and json.loads(ran.out)["outcome"] == "failed"
    assert cli("ingest", "github", "d-1", "--payload", '{"pr": 1}', now=T0).code == 0
    assert cli("ingest", "github", "d-1", "--payload", '{"pr": 2}', now=T0).code == 3
    status = doc(cli("status", "--json"))
    assert status["db"] == parse(pg_url).location
    assert status["events"] == {"pending": 1, "running": 0, "done": 0, "dead": 1}
    ran = cli("run", "--json", "--", *handler, now=T0 + 1)
    assert json.loads(ran.out)["outcome"] == "done"
    [dead] = doc(cli("dead", "--json"))
    assert dead["source_id"] == "poison" and "cannot handle poison" in dead["error"]
    shown = cli("dead", "show", str(dead["id"]))
    assert shown.code == 0 and "failed" in shown.out
    assert "replayed 1 event(s)" in cli("replay", "--all", now=T0 + 2).out

    sent = tmp_path / "sent.txt"
    out = cli("dispatch", "--", "sh", "-c", f"cat > {sent}", now=T0 + 3)
    assert out.code == 0, out.err
    assert sent.read_text() == "handled d-1"
    assert doc(cli("outbox", "list", "--json")) == []

    assert cli("schedule", "add", "digest", "--every", "1d", now=T0).code == 0
    assert [t["name"] for t in doc(cli("schedule", "list", "--json"))] == ["digest"]
    assert "1 due timer(s) fired" in cli("schedule", "tick", now=T0).out
    assert cli("schedule", "remove", "digest").code == 0
    assert cli("approve", "request", "r1", "--expires-in", "1h", "--action", "refund",
               now=T0).code == 0
    assert cli("approve", "answer", "r1", "yes", now=T0 + 60).out.strip() == "r1: yes"
    assert [a["outcome"] for a in doc(cli("approve", "list", "--json", now=T0))] == ["yes"]
    assert doc(cli("status", "--json"))["events"] == {
        "pending": 3, "running": 0, "done": 1, "dead": 0}  # poison, the timer, the answer
    assert open_inbox().status().events["pending"] == 3


def test_the_flag_the_variable_and_the_setting_each_choose_the_database(
        cli: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch, open_inbox: Inbox) -> None:
    elsewhere = with_schema(pg_url, parse(pg_url).schema + "_b")
    try:
        monkeypatch.delenv("AGENTBOX_DB")
        assert cli("config", "set", "database", pg_url).code == 0
        assert cli("ingest", "s", "by-setting").code == 0
        monkeypatch.setenv("AGENTBOX_DB", elsewhere)
        assert cli("ingest", "s", "by-variable").code == 0
        assert cli("--db", pg_url, "ingest", "s", "by-flag").code == 0
        assert doc(cli("status", "--json"))["db"] == parse(elsewhere).location
        assert [e.source_id for e in (open_inbox().find("s", i) for i in
                                      ("by-setting", "by-flag", "by-variable")) if e] == [
            "by-setting", "by-flag"]
        with open_store(elsewhere, "alice") as other:
            assert other.find("s", "by-variable") is not None
    finally:
        with psycopg.connect(server_url(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {parse(elsewhere).schema} CASCADE")


def test_users_share_a_database_and_see_only_their_own_inbox(cli: Any, open_inbox: Inbox) -> None:
    for user in ("alice", "bob"):
        assert "stored" in cli("-u", user, "ingest", "chat", "m1").out
    assert cli("-u", "bob", "ingest", "chat", "m2").code == 0
    assert doc(cli("-u", "alice", "status", "--json"))["events"]["pending"] == 1
    assert doc(cli("-u", "bob", "status", "--json"))["events"]["pending"] == 2
    assert open_inbox("alice").instance_id() != open_inbox("bob").instance_id()


def test_a_command_that_only_reads_makes_no_inbox(cli: Any, open_inbox: Inbox) -> None:
    assert doc(cli("-u", "carol", "status", "--json"))["events"]["pending"] == 0
    assert cli("-u", "carol", "dead").code == 0
    names = open_inbox().engine.conn.execute("SELECT name FROM inboxes").fetchall()
    assert ("carol",) not in names
    assert cli("-u", "carol", "ingest", "chat", "m1").code == 0
    assert ("carol",) in open_inbox().engine.conn.execute("SELECT name FROM inboxes").fetchall()


def test_the_password_is_never_shown(cli: Any, pg_url: str) -> None:
    parts = pg_url.split("://", 1)
    secret_url = f"{parts[0]}://{parts[1].replace('@', ':hunter2@', 1)}&password=hunter2"
    status = cli("--db", secret_url, "status", "--json")
    assert status.code == 0, status.err
    assert "hunter2" not in status.out
    unreachable = cli("--db", "postgresql://postgres:hunter2@127.0.0.1:1/test", "status")
    assert unreachable.code == 1
    assert unreachable.err.startswith(
        "agentbox: error: postgresql://postgres@127.0.0.1:1/test: cannot connect to PostgreSQL")
    assert "hunter2" not in unreachable.err and unreachable.err.count("\n") == 1


@pytest.mark.parametrize(("url", "code", "says"), [
    ("postgresql://postgres@127.0.0.1:5432/test?schema=Bad-Name", 2, "schema 'Bad-Name'"),
    ("postgresql://postgres@127.0.0.1:5432/no_such_database_here", 1,
     'database "no_such_database_here" does not exist'),
])
def test_an_unusable_url_is_one_line(cli: Any, url: str, code: int, says: str) -> None:
    result = cli("--db", url, "status")
    assert result.code == code
    assert says in result.err and result.err.count("\n") == 1


def test_without_psycopg_a_url_names_the_extra_to_install(home: Path, pg_url: str) -> None:
    probe = ("import sys\n"
             "sys.modules['psycopg'] = None  # as if it were not installed\n"
             "from agentbox.cli import run\n"
             f"sys.exit(run(['--db', {pg_url!r}, 'status']))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"agentbox: error: {POSTGRES_EXTRA}\n"


def test_a_schema_from_a_newer_agentbox_is_refused_and_left_alone(
        cli: Any, open_inbox: Inbox) -> None:
    assert cli("ingest", "chat", "m1").code == 0
    store = open_inbox()
    store.engine.conn.execute("INSERT INTO migrations (version, applied_at) VALUES (99, 0)")
    before = store.engine.conn.execute("SELECT * FROM migrations ORDER BY version").fetchall()
    result = cli("status")
    assert result.code == 1
    assert ("made by a newer agentbox (schema 99, this one knows up to "
            f"{SCHEMA_VERSION})") in result.err
    migrations = store.engine.conn.execute("SELECT * FROM migrations ORDER BY version")
    assert migrations.fetchall() == before
    assert store.find("chat", "m1") is not None


def test_a_schema_holding_other_tables_is_refused(cli: Any, pg_url: str) -> None:
    with psycopg.connect(server_url(), autocommit=True) as conn:
        schema = parse(pg_url).schema
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.invoices (id int)")
    result = cli("ingest", "chat", "m1")
    assert result.code == 1
    assert "holds tables, but not an agentbox database" in result.err


def test_a_nul_byte_in_handler_stderr_is_recorded_without_it(
        cli: Any, tmp_path: Path, open_inbox: Inbox) -> None:
    script = tmp_path / "nul.py"
    script.write_text("import sys\nsys.stderr.buffer.write(b'bad\\x00byte')\nsys.exit(1)\n")
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    result = cli("run", "--", sys.executable, str(script), now=T0)
    assert result.code == 1, result.err
    event = open_inbox().find("chat", "m1")
    assert event is not None and event.status == "pending"
    assert event.error is not None and "bad\ufffdbyte" in event.error


def test_ingest_loads_only_what_ingest_needs(home: Path, pg_url: str) -> None:
    probe = ("import sys\n"
             "from agentbox.cli import run\n"
             "code = run(['ingest', 'github', 'd-1', '--payload', '{}'])\n"
             "print(code, ' '.join(sorted(m for m in sys.modules\n"
             "                            if m.startswith('agentbox.backends'))),\n"
             "      file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)  # the home fixture put AGENTBOX_DB in our environment
    code, _, loaded = done.stderr.strip().partition(" ")
    assert code == "0", done.stderr
    assert loaded.split() == [
        "agentbox.backends", "agentbox.backends.postgres", "agentbox.backends.postgres.db",
        "agentbox.backends.postgres.engine", "agentbox.backends.postgres.schema",
        "agentbox.backends.postgres.url"]


def test_scenarios_replay_on_postgresql_and_leave_no_schema(cli: Any, pg_url: str) -> None:
    from agentbox.replay import shipped

    def scratch_schemas() -> set[str]:
        with psycopg.connect(server_url(), autocommit=True) as conn:
            return {r[0] for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'agentbox_scratch_%'")}

    before = scratch_schemas()
    result = doc(cli("scenarios", "--db", server_url(), "--json"))
    assert result["ok"] is True and result["failed"] == 0
    assert [s["name"] for s in result["scenarios"]] == [name for name, _ in shipped()]
    assert result["checked"] == result["passed"] > 100
    assert doc(cli("--db", server_url(), "scenarios", "lease-takeover", "--json"))["ok"]
    assert scratch_schemas() == before
    refused = cli("scenarios", "--db", "inbox.sqlite3")
    assert refused.code == 2 and "takes a postgresql:// URL" in refused.err
