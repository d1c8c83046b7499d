"""`agentbox ingest` of one event: rule 1 (ingest once) through the CLI."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli
from support.store import users_at


def ingest_json(cli: Cli, *args: str, stdin: str | bytes | None = None) -> tuple[int, Any]:
    result = cli("ingest", *args, "--json", now=T0, stdin=stdin)
    return result.code, json.loads(result.out) if result.out else None


def test_stored_then_duplicate_with_keys_reordered_and_whitespace(cli: Cli, rows: Any) -> None:
    code, first = ingest_json(cli, "github", "d-1", "--payload", '{"a": 1, "b": [1, 2]}')
    assert code == 0
    assert first == {"outcome": "stored", "id": 1, "source": "github", "source_id": "d-1"}

    code, again = ingest_json(cli, "github", "d-1", "--payload",
                              '{\n  "b" : [ 1,2 ],\t"a":1 }')
    assert code == 0
    assert again == {"outcome": "duplicate", "id": 1, "source": "github", "source_id": "d-1"}
    assert rows("SELECT COUNT(*), MIN(payload) FROM events") == [
        (1, '{"a":1,"b":[1,2]}')]


def test_conflict_exits_3_and_the_first_payload_stands(cli: Cli, rows: Any,
                                                      open_inbox: Any) -> None:
    assert cli("ingest", "chat", "m-7", "--payload", '{"text": "first"}', now=T0).code == 0
    result = cli("ingest", "chat", "m-7", "--payload", '{"text": "second"}', now=T0)
    assert result.code == 3
    assert "conflict" in result.out and "first stands" in result.out
    assert rows("SELECT payload FROM events") == [('{"text":"first"}',)]
    with open_inbox() as store:
        assert [e.action for e in store.story(1)] == ["stored", "conflict"]

    code, doc = ingest_json(cli, "chat", "m-7", "--payload", '{"text": "third"}')
    assert (code, doc["outcome"], doc["id"]) == (3, "conflict", 1)


def test_human_output_for_each_outcome(cli: Cli) -> None:
    assert cli("ingest", "s", "1", now=T0).out == "stored s/1 as event 1\n"
    assert cli("ingest", "s", "1", now=T0).out == "duplicate: s/1 is already event 1\n"


def test_default_payload_is_an_empty_object(cli: Cli, rows: Any) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert rows("SELECT payload, created_at FROM events") == [("{}", T0)]


def test_payload_from_file_and_from_stdin(cli: Cli, tmp_path: Path, rows: Any) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"from": "file", "n": 1}')
    assert cli("ingest", "s", "f", "--payload-file", str(body), now=T0).code == 0
    assert cli("ingest", "s", "i", "-f", "-", stdin='{"from": "stdin"}', now=T0).code == 0
    assert rows("SELECT source_id, payload FROM events ORDER BY id") == [
        ("f", '{"from":"file","n":1}'), ("i", '{"from":"stdin"}')]


def test_unicode_is_stored_as_text_and_compared_canonically(cli: Cli, rows: Any) -> None:
    assert cli("ingest", "s", "é", "--payload", '{"t": "h\\u00e9 ☃"}', now=T0).code == 0
    assert cli("ingest", "s", "é", "--payload", '{"t":"hé ☃"}', now=T0).code == 0
    assert rows("SELECT source_id, payload FROM events") == [("é", '{"t":"hé ☃"}')]


@pytest.mark.parametrize(("payload", "needle"), [
    ('{"a": NaN}', "NaN"),
    ('{"a": Infinity}', "Infinity"),
    ('{"a": -Infinity}', "Infinity"),
    ('{"a": 1e400}', "out of range"),
    ("[1, 2]", "an array"),
    ('"text"', "a string"),
    ("42", "a number"),
    ("null", "null"),
    ('{"a": 1', "not valid JSON"),
    ('{"a": 1}}', "not valid JSON"),
    ("", "not valid JSON"),
    ('{"a": 1, "a": 2}', "duplicate key"),
    ('{"a": "\\ud800"}', "surrogate"),
    ('{"a": ' + "1" * 5000 + "}", "digits"),
    ("[" * 100_000, "nested more than 64 levels deep"),
])
def test_not_strict_json_is_refused_with_65(cli: Cli, one_error: Any,
                                            payload: str, needle: str, place: str) -> None:
    result = cli("ingest", "s", "1", "--payload", payload, now=T0)
    assert result.code == 65
    assert needle in one_error(result.err)
    assert result.out == ""
    assert users_at(place) == []


def test_invalid_utf8_on_stdin_is_65(cli: Cli, one_error: Any, place: str) -> None:
    result = cli("ingest", "s", "1", "-f", "-", stdin=b'{"a": "\xff\xfe"}', now=T0)
    assert result.code == 65
    assert "UTF-8" in one_error(result.err)
    assert users_at(place) == []


def test_size_bound_default_is_256_kib(cli: Cli,
                                       one_error: Any, rows: Any) -> None:
    limit = 256 * 1024
    fits = '{"x":"' + "a" * (limit - 8) + '"}'
    assert len(fits) == limit
    assert cli("ingest", "s", "fits", "-f", "-", stdin=fits, now=T0).code == 0
    over = '{"x":"' + "a" * (limit - 7) + '"}'
    for args, stdin in ((["-f", "-"], over), (["--payload", over], None)):
        result = cli("ingest", "s", "over", *args, stdin=stdin, now=T0)
        assert result.code == 65
        assert f"{limit}-byte limit" in one_error(result.err)
    assert rows("SELECT source_id FROM events") == [("fits",)]


def test_size_bound_follows_config_set_max_payload(cli: Cli, rows: Any) -> None:
    assert cli("config", "set", "max_payload", "20").code == 0
    assert cli("ingest", "s", "small", "--payload", '{"x": "0123456789"}', now=T0).code == 0
    big = cli("ingest", "s", "big", "--payload", '{"x": "0123456789abc"}', now=T0)
    assert big.code == 65 and "20-byte limit" in big.err
    assert cli("config", "set", "max_payload", "1000", "--all-users").code == 0
    # the user's own table still wins over the default for everyone
    assert cli("ingest", "s", "big", "--payload", '{"x": "0123456789abc"}', now=T0).code == 65
    assert rows("SELECT source_id FROM events") == [("small",)]


@pytest.mark.parametrize(("argv", "needle"), [
    (["ingest"], "SOURCE and SOURCE_ID"),
    (["ingest", "s"], "SOURCE and SOURCE_ID"),
    (["ingest", "s", "1", "--payload", "{}", "--payload-file", "-"], "not both"),
    (["ingest", "s", "--jsonl", "-"], "--jsonl takes no"),
    (["ingest", "--jsonl", "-", "--payload", "{}"], "--jsonl takes no"),
    (["ingest", "s", "1", "--signature", "sha256=00"], "go together"),
    (["ingest", "s", "1", "--secret-env", "X"], "go together"),
    (["ingest", "s", "1", "--bogus"], "No such option"),
])
def test_usage_errors_exit_2_and_store_nothing(cli: Cli, home: Path, one_error: Any,
                                               argv: list[str], needle: str) -> None:
    result = cli(*argv, now=T0, stdin="")
    assert result.code == 2
    assert needle in one_error(result.err)
    assert not home.exists()


@pytest.mark.parametrize(("source", "source_id", "needle"), [
    ("", "1", "source must be a non-empty string"),
    ("s", "", "source_id must be a non-empty string"),
    ("s" * 513, "1", "longer than 512"),
])
def test_bad_keys_are_65(cli: Cli, one_error: Any, source: str, source_id: str,
                         needle: str, place: str) -> None:
    result = cli("ingest", source, source_id, now=T0)
    assert result.code == 65
    assert needle in one_error(result.err)
    assert users_at(place) == []


def test_unreadable_payload_file_is_65(cli: Cli, tmp_path: Path, one_error: Any) -> None:
    result = cli("ingest", "s", "1", "-f", str(tmp_path / "missing.json"), now=T0)
    assert result.code == 65
    assert "cannot read" in one_error(result.err)


def test_new_folders_are_0700_and_the_inbox_0600(cli: Cli, home: Path, inbox_path: Path) -> None:
    old = os.umask(0)  # the modes must not depend on a friendly umask
    try:
        assert cli("ingest", "s", "1", now=T0).code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(inbox_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(inbox_path.stat().st_mode) == 0o600
    # -wal and -shm are gone once the process closes the inbox: the next test
    # looks at them while it is open.


def test_wal_and_shm_files_are_0600_while_open(home: Path, inbox_path: Path,
                                               open_inbox: Any) -> None:

    old = os.umask(0)
    try:
        with open_inbox() as store:
            store.ingest("s", "1", "{}", T0)
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in inbox_path.parent.iterdir()}
    finally:
        os.umask(old)
    assert modes == {"alice.sqlite3": 0o600, "alice.sqlite3-wal": 0o600,
                     "alice.sqlite3-shm": 0o600, ".alice.sqlite3.lock": 0o600}


def test_db_flag_names_the_file(cli: Cli, tmp_path: Path, home: Path, query: Any) -> None:
    db = tmp_path / "elsewhere" / "inbox.db"
    db.parent.mkdir()
    assert cli("--db", str(db), "ingest", "s", "1", now=T0).code == 0
    assert query(db, "SELECT source, source_id FROM events") == [("s", "1")]
    assert not (home / "inboxes").exists()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_each_user_has_an_inbox_of_their_own(cli: Cli, home: Path, query: Any) -> None:
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert cli("--user", "bob", "ingest", "s", "1", "--payload", '{"b":1}', now=T0).code == 0
    assert cli("-u", "bob", "ingest", "s", "2", now=T0).code == 0
    assert query(home / "inboxes" / "alice.sqlite3", "SELECT COUNT(*) FROM events") == [(1,)]
    assert query(home / "inboxes" / "bob.sqlite3", "SELECT COUNT(*) FROM events") == [(2,)]


def test_empty_agentbox_user_counts_as_unset(cli: Cli, place: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBOX_USER", "")
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "carol")
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert users_at(place) == ["carol"]
    doc = json.loads(cli("status", "--json").out)
    assert doc["user"] == "carol"


def test_a_login_name_that_cannot_name_an_inbox_asks_for_user(
        cli: Cli, home: Path, one_error: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTBOX_USER")
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "John Smith")
    result = cli("ingest", "s", "1", now=T0)
    assert result.code == 65
    assert "--user" in one_error(result.err)
    assert not home.exists()
