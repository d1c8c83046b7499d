"""`status`, `dead [list]`, `dead show ID` and `replay ID…|--all` through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import is_url
from support.clock import T0
from support.fixtures import Cli
from support.store import place_snapshot


def status_doc(cli: Cli, *flags: str) -> dict[str, Any]:
    result = cli(*flags, "status", "--json", now=T0)
    assert result.code == 0, result.err
    doc: dict[str, Any] = json.loads(result.out)
    return doc


def assert_counts(doc: dict[str, Any]) -> None:
    """The status document of docs/design.md: every count an integer, zero included."""
    assert set(doc) == {"user", "db", "events", "outbox", "lease", "next_timer", "paused",
                        "held"}
    assert set(doc["events"]) == {"pending", "running", "done", "dead"}
    assert set(doc["outbox"]) == {"held", "sending", "sent", "uncertain"}
    for group in ("events", "outbox"):
        for value in doc[group].values():
            assert type(value) is int


def test_status_of_a_new_inbox_is_all_zeros(cli: Cli, place: str) -> None:
    doc = status_doc(cli)
    assert_counts(doc)
    assert doc == {"user": "alice",
                   "db": place if is_url(place) else str(Path(place) / "alice.sqlite3"),
                   "events": {"pending": 0, "running": 0, "done": 0, "dead": 0},
                   "outbox": {"held": 0, "sending": 0, "sent": 0, "uncertain": 0},
                   "lease": None, "next_timer": None, "paused": None, "held": {}}


def test_status_counts_lease_and_timer(cli: Cli, make_dead: Any,
                                       open_inbox: Any) -> None:
    from agentbox.rules.timers import TimerSpec

    make_dead(["d1", "d2"], T0)
    for i in range(3):
        assert cli("ingest", "s", f"p{i}", now=T0).code == 0
    with open_inbox() as store:
        generation = store.acquire("worker-9", T0, 120)
        assert generation == 2  # make_dead held and released generation 1
        store.add_timer(TimerSpec(name="nightly", due=T0 + 50, every=86_400), T0)
    doc = status_doc(cli)
    assert_counts(doc)
    assert doc["events"] == {"pending": 3, "running": 0, "done": 0, "dead": 2}
    assert doc["lease"] == {"holder": "worker-9", "generation": 2, "until": T0 + 120,
                            "released": False}
    assert doc["next_timer"] == {"name": "nightly", "due": T0 + 50}

    human = cli("status", now=T0)
    assert human.code == 0
    for needle in ("alice", "3 pending", "2 dead", "held by worker-9", "generation 2",
                   "until 1970-01-12T13:48:40Z", "nightly"):
        assert needle in human.out


def test_status_shows_an_expired_lease_as_free(cli: Cli, open_inbox: Any) -> None:

    with open_inbox() as store:
        store.acquire("w", T0, 10)
    assert "held by w" in cli("status", now=T0 + 10).out
    assert "free (expired at 1970-01-12T13:46:50Z)" in cli("status", now=T0 + 11).out


def test_status_with_db_flag(cli: Cli, tmp_path: Path, home: Path) -> None:
    db = tmp_path / "x.sqlite3"
    doc = status_doc(cli, "--db", str(db))
    assert doc["db"] == str(db) and doc["user"] == "alice"
    assert not home.exists()


def test_dead_list_json_and_table(cli: Cli, make_dead: Any) -> None:
    ids = make_dead(["x", "y"], T0, error="KeyError: 'y'")
    assert cli("ingest", "s", "alive", now=T0).code == 0
    for argv in (["dead", "--json"], ["dead", "list", "--json"]):
        result = cli(*argv, now=T0)
        assert result.code == 0
        rows = json.loads(result.out)
        assert [r["id"] for r in rows] == ids
        for row, key in zip(rows, ["x", "y"], strict=True):
            assert {"id", "source", "source_id", "attempts", "error", "payload"} <= set(row)
            assert row["source"] == "src" and row["source_id"] == key
            assert row["attempts"] == 1 and row["status"] == "dead"
            assert row["error"] == "KeyError: 'y'"
            assert row["payload"] == {"key": key}
    limited = json.loads(cli("dead", "list", "-n", "1", "--json").out)
    assert [r["id"] for r in limited] == ids[:1]
    table = cli("dead", now=T0)
    assert table.code == 0
    assert "KeyError" in table.out and "src" in table.out


def test_dead_list_when_nothing_is_dead(cli: Cli) -> None:
    assert json.loads(cli("dead", "--json").out) == []
    assert cli("dead").out == "dead events: none\n"
    assert cli("dead", "list").out == "dead events: none\n"


def test_dead_list_bad_limit_is_usage(cli: Cli, one_error: Any) -> None:
    result = cli("dead", "list", "--limit", "0")
    assert result.code == 2
    one_error(result.err)


def test_dead_show_tells_the_whole_story(cli: Cli, make_dead: Any) -> None:
    (event_id,) = make_dead(["story"], T0, error="boom at step 3")
    cli("ingest", "src", "story", "--payload", '{"key": "other"}', now=T0 + 5)  # a conflict
    result = cli("dead", "show", str(event_id), "--json", now=T0)
    assert result.code == 0
    doc = json.loads(result.out)
    assert doc["id"] == event_id and doc["status"] == "dead"
    assert doc["payload"] == {"key": "story"} and doc["error"] == "boom at step 3"
    actions = [h["action"] for h in doc["history"]]
    assert actions == ["stored", "claimed", "failed", "dead", "conflict"]
    assert doc["history"][1]["generation"] == 1
    assert doc["history"][2]["detail"] == "boom at step 3"
    human = cli("dead", "show", str(event_id), now=T0)
    assert human.code == 0
    for needle in ("src/story", "boom at step 3", '"key": "story"', "claimed", "conflict"):
        assert needle in human.out


def test_dead_show_unknown_id_and_bad_id(cli: Cli, one_error: Any) -> None:
    cli("ingest", "s", "1", now=T0)
    missing = cli("dead", "show", "99")
    assert missing.code == 65
    assert "no event with id 99" in one_error(missing.err)
    bad = cli("dead", "show", "abc")
    assert bad.code == 2
    one_error(bad.err)


def test_replay_ids_back_to_pending_same_row(cli: Cli, make_dead: Any, rows: Any) -> None:
    ids = make_dead(["a", "b", "c"], T0)
    result = cli("replay", str(ids[0]), str(ids[2]), "--json", now=T0 + 10)
    assert result.code == 0
    assert json.loads(result.out) == {"replayed": [ids[0], ids[2]], "not_dead": []}
    found = rows("SELECT id, status, attempts, error, updated_at FROM events ORDER BY id")
    assert found == [(ids[0], "pending", 0, None, T0 + 10),
                    (ids[1], "dead", 1, "handler exploded", T0),
                    (ids[2], "pending", 0, None, T0 + 10)]
    assert rows("SELECT COUNT(*) FROM history WHERE action = 'replayed'") == [(2,)]
    assert status_doc(cli)["events"] == {"pending": 2, "running": 0, "done": 0, "dead": 1}


def test_replay_all(cli: Cli, make_dead: Any) -> None:
    ids = make_dead(["a", "b"], T0)
    result = cli("replay", "--all", now=T0)
    assert result.code == 0
    assert result.out == f"replayed 2 event(s): {ids[0]}, {ids[1]}\n"
    again = cli("replay", "--all", "--json", now=T0)
    assert again.code == 0
    assert json.loads(again.out) == {"replayed": [], "not_dead": []}


def test_replay_of_an_event_that_is_not_dead_exits_3(cli: Cli, make_dead: Any) -> None:
    (dead_id,) = make_dead(["d"], T0)
    cli("ingest", "s", "live", now=T0)
    live_id = dead_id + 1
    result = cli("replay", str(dead_id), str(live_id), now=T0)
    assert result.code == 3
    assert f"event {live_id} is pending, not dead: left alone" in result.out
    doc = json.loads(cli("replay", str(live_id), "--json", now=T0).out)
    assert doc == {"replayed": [], "not_dead": [live_id]}


@pytest.mark.parametrize(("argv", "code"), [
    (["replay"], 2),
    (["replay", "1", "--all"], 2),
    (["replay", "42"], 65),
    (["replay", "x"], 2),
])
def test_replay_refusals(cli: Cli, place: str, make_dead: Any, one_error: Any,
                         argv: list[str], code: int) -> None:
    make_dead(["a"], T0)
    before = place_snapshot(place)
    result = cli(*argv, now=T0)
    assert result.code == code
    one_error(result.err)
    assert place_snapshot(place) == before


def test_bad_explicit_user_is_refused_even_with_db(cli: Cli, tmp_path: Path, one_error: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "x.sqlite3"
    for argv in (["status"], ["dead"], ["dead", "show", "1"], ["replay", "--all"]):
        result = cli("--db", str(db), "--user", "../etc", *argv, now=T0)
        assert result.code == 65, argv
        assert "invalid user name" in one_error(result.err)
    monkeypatch.setenv("AGENTBOX_USER", "a b")
    assert cli("--db", str(db), "status", now=T0).code == 65
    assert not db.exists()


def test_status_shows_a_released_lease_as_free(cli: Cli, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setenv("COLUMNS", "200")

    handler = tmp_path / "ok.py"
    handler.write_text("import sys\nsys.stdin.read()\n")
    assert cli("ingest", "s", "1", now=T0).code == 0
    assert cli("run", "--", sys.executable, str(handler), now=T0).code == 0
    out = cli("status", now=T0).out
    assert "free (released at 1970-01-12T13:46:40Z)" in out and "last held by" in out
    doc = status_doc(cli)
    assert doc["lease"]["generation"] == 1 and doc["lease"]["released"] is True


def test_a_busy_run_names_the_lease_end_as_a_time(cli: Cli, tmp_path: Path,
                                                  one_error: Any, open_inbox: Any) -> None:
    import sys


    with open_inbox() as store:
        assert store.acquire("other-host:42:abcd", T0, 120) == 1
    result = cli("run", "--", sys.executable, "-c", "pass", now=T0 + 10)
    assert result.code == 75
    line = one_error(result.err)
    assert "until 1970-01-12T13:48:40Z" in line, line
    assert str(T0 + 120) not in line


def test_bare_dead_takes_a_limit_like_dead_list(cli: Cli, make_dead: Any) -> None:
    ids = make_dead(["x", "y", "z"], T0)
    for argv in (["dead", "--limit", "2", "--json"], ["dead", "-n", "2", "--json"],
                 ["dead", "list", "-n", "2", "--json"]):
        result = cli(*argv)
        assert result.code == 0, result.err
        assert [r["id"] for r in json.loads(result.out)] == ids[:2]
    assert cli("dead", "-n", "1").code == 0
    assert cli("dead", "--limit", "0").code == 2
