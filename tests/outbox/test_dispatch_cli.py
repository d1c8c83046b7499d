"""`agentbox dispatch` and `agentbox outbox` through the CLI, with the clock pinned."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from agentbox import paths
from agentbox.ledger.store import Store
from agentbox.rules.outbox import CLAIM_GRACE
from support.clock import T0

Queue = Callable[..., None]
MINUTE = 60


def outbox_rows(cli: Callable[..., Any], *flags: str) -> list[dict[str, Any]]:
    result = cli("outbox", "list", "--json", *flags)
    assert result.code == 0, result.err
    rows: list[dict[str, Any]] = json.loads(result.out)
    return rows


@pytest.mark.parametrize("through", ["stdout", "sender"])
def test_article_case_8_three_updates_inside_an_hour(cli: Callable[..., Any],
                                                     cli_queue: Queue, sender: Any,
                                                     through: str) -> None:
    via = ["--", *sender.argv] if through == "sender" else []
    printed: list[str] = []
    for n, minute in enumerate((0, 10, 20)):
        now = T0 + minute * MINUTE
        cli_queue(now, f"update {n}")
        result = cli("dispatch", "--gap", "1h", *via, now=now)
        assert result.code == 0, result.err
        printed.append(result.out)
    final = cli("dispatch", "--gap", "1h", *via, now=T0 + 61 * MINUTE)
    assert final.code == 0, final.err
    printed.append(final.out)
    if through == "stdout":
        # Only the body on stdout, nothing at all when there is nothing to send.
        assert printed == ["update 0\n", "", "", "update 1\n\nupdate 2\n"]
    else:
        assert printed == ["", "", "", ""]
        assert [c["body"] for c in sender.calls()] == ["update 0", "update 1\n\nupdate 2"]
    assert all(r["state"] == "sent" for r in outbox_rows(cli, "--all"))


def test_waiting_says_when_the_next_send_is_allowed(cli: Callable[..., Any],
                                                    cli_queue: Queue) -> None:
    cli_queue(T0, "first")
    assert cli("dispatch", now=T0).code == 0
    cli_queue(T0 + 10 * MINUTE, "second")
    result = cli("dispatch", "--gap", "1h", now=T0 + 10 * MINUTE)
    assert result.code == 0
    assert result.out == ""
    assert "1 message(s) held" in result.err
    assert "1970-01-12T14:46:40Z (in 50m)" in result.err
    doc = json.loads(cli("dispatch", "--gap", "1h", "--json", now=T0 + 10 * MINUTE).out)
    assert doc == {"outcome": "waiting", "held": 1, "next_send_at": T0 + 3600,
                   "in_flight": 0, "in_flight_until": None, "channel": "default",
                   "reason": "gap"}
    nothing = cli("dispatch", "--json", now=T0 + 2 * 3600)
    assert json.loads(nothing.out)["outcome"] == "sent"
    assert json.loads(cli("dispatch", "--json", now=T0 + 2 * 3600).out)["outcome"] == "nothing"


def test_urgent_bypasses_the_gap_and_takes_the_held_ones(cli: Callable[..., Any],
                                                         cli_queue: Queue,
                                                         sender: Any) -> None:
    cli_queue(T0, "morning report")
    assert cli("dispatch", "--", *sender.argv, now=T0).code == 0
    cli_queue(T0 + 5 * MINUTE, "routine note")
    cli_queue(T0 + 6 * MINUTE, "the build is on fire", urgent=True)
    result = cli("dispatch", "--json", "--", *sender.argv, now=T0 + 6 * MINUTE)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert (doc["outcome"], doc["urgent"], doc["messages"]) == ("sent", True, [2, 3])
    calls = sender.calls()
    assert [c["body"] for c in calls] == ["morning report",
                                          "routine note\n\nthe build is on fire"]
    assert [c["urgent"] for c in calls] == ["0", "1"]


def test_the_sender_gets_key_user_and_database(cli: Callable[..., Any], cli_queue: Queue,
                                               sender: Any) -> None:
    cli_queue(T0, "hello")
    result = cli("dispatch", "--json", "--via", " ".join(sender.argv), now=T0)
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    [call] = sender.calls()
    assert call["key"] == doc["key"]
    assert call["attempt"] == "1"
    assert call["user"] == "alice"
    assert call["db"] == os.environ.get("AGENTBOX_DB", os.path.abspath(paths.inbox_path("alice")))
    assert [r["dispatch_key"] for r in outbox_rows(cli, "--all")] == [doc["key"]]


def test_a_failing_sender_holds_the_rows_again(cli: Callable[..., Any], cli_queue: Queue,
                                               sender: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cli_queue(T0, "try me")
    monkeypatch.setenv("SENDER_EXIT", "3")
    failed = cli("dispatch", "--", *sender.argv, now=T0)
    assert failed.code == 1
    assert "sender exited 3: the channel said no" in failed.err
    assert "held again" in failed.err
    [row] = outbox_rows(cli)
    assert (row["state"], row["dispatch_key"]) == ("held", None)
    assert row["error"] == "sender exited 3: the channel said no"
    table = cli("outbox", now=T0)
    assert "channel" in table.out and "held" in table.out
    monkeypatch.setenv("SENDER_EXIT", "0")
    # A failed send does not count toward the gap: the next dispatch sends at once.
    sent = cli("dispatch", "--json", "--", *sender.argv, now=T0 + 1)
    assert sent.code == 0, sent.err
    assert [c["body"] for c in sender.calls()] == ["try me", "try me"]
    assert [r["state"] for r in outbox_rows(cli, "--all")] == ["sent"]
    assert outbox_rows(cli, "--all")[0]["error"] is None


def test_a_sender_that_cannot_start_is_a_failure(cli: Callable[..., Any],
                                                 cli_queue: Queue, tmp_path: Any) -> None:
    cli_queue(T0, "nowhere")
    result = cli("dispatch", "--", str(tmp_path / "no-such-sender"), now=T0)
    assert result.code == 1
    assert "cannot start" in result.err
    [row] = outbox_rows(cli)
    assert row["state"] == "held" and "cannot start" in row["error"]


def test_sender_timeout_at_least_once_resends_after_the_deadline(
        cli: Callable[..., Any], cli_queue: Queue, sender: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cli_queue(T0, "slow")
    monkeypatch.setenv("SENDER_WAIT_FOR", str(sender.release))  # never released
    result = cli("dispatch", "--timeout", "1s", "--mode", "at-least-once", "--",
                 *sender.argv, now=T0)
    assert result.code == 1
    assert "sender timed out after 1s" in result.err and "resent under the same key" in result.err
    [row] = outbox_rows(cli)
    assert (row["state"], row["error"]) == ("sending", "sender timed out after 1s")
    monkeypatch.delenv("SENDER_WAIT_FOR")
    deadline = T0 + 1 + CLAIM_GRACE
    early = cli("dispatch", "--json", "--", *sender.argv, now=deadline)
    assert json.loads(early.out) == {"outcome": "nothing", "held": 0, "next_send_at": None,
                                     "in_flight": 1, "in_flight_until": deadline,
                                     "channel": "default", "reason": None}
    again = cli("dispatch", "--json", "--", *sender.argv, now=deadline + 1)
    assert again.code == 0, again.err
    doc = json.loads(again.out)
    calls = sender.calls()
    assert [c["key"] for c in calls] == [row["dispatch_key"]] * 2
    assert [c["attempt"] for c in calls] == ["1", "2"]
    assert (doc["key"], doc["attempt"]) == (row["dispatch_key"], 2)
    assert [r["state"] for r in outbox_rows(cli, "--all")] == ["sent"]


def test_sender_timeout_at_most_once_is_uncertain_until_resolved(
        cli: Callable[..., Any], cli_queue: Queue, sender: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cli("config", "set", "delivery", "at-most-once")
    cli_queue(T0, "careful")
    monkeypatch.setenv("SENDER_WAIT_FOR", str(sender.release))
    result = cli("dispatch", "--timeout", "1s", "--json", "--", *sender.argv, now=T0)
    assert result.code == 1
    doc = json.loads(result.out)
    assert (doc["outcome"], doc["mode"], doc["resend_after"]) == ("unknown", "at-most-once",
                                                                  None)
    monkeypatch.delenv("SENDER_WAIT_FOR")
    [row] = outbox_rows(cli)
    assert (row["state"], row["dispatch_key"]) == ("uncertain", doc["key"])
    for later in (T0 + 3600, T0 + 86400):
        assert cli("dispatch", "--", *sender.argv, now=later).code == 0
    assert len(sender.calls()) == 1
    resolved = cli("outbox", "resolve", doc["key"], "--unsent", "--json", now=T0 + 86400)
    assert json.loads(resolved.out) == {"key": doc["key"], "resolved": "unsent",
                                        "messages": 1}
    assert cli("dispatch", "--", *sender.argv, now=T0 + 86401).code == 0
    assert [c["body"] for c in sender.calls()] == ["careful", "careful"]
    assert sender.calls()[1]["key"] != doc["key"]


def test_a_sender_ending_by_a_signal_means_not_known(cli: Callable[..., Any],
                                                     cli_queue: Queue) -> None:
    cli_queue(T0, "ambiguous")
    result = cli("dispatch", "--json", "--mode", "at-most-once", "--", "sh", "-c",
                 "cat >/dev/null; kill -TERM $$", now=T0)
    assert result.code == 1
    doc = json.loads(result.out)
    assert (doc["outcome"], doc["error"]) == ("unknown", "sender killed by signal 15")
    assert [r["state"] for r in outbox_rows(cli)] == ["uncertain"]


def test_resolve_exit_codes(cli: Callable[..., Any], cli_queue: Queue, sender: Any) -> None:
    unknown = cli("outbox", "resolve", "no-such-key", "--sent")
    assert unknown.code == 65 and "no dispatch" in unknown.err
    cli_queue(T0, "fine")
    sent = json.loads(cli("dispatch", "--json", "--", *sender.argv, now=T0).out)
    not_uncertain = cli("outbox", "resolve", sent["key"], "--sent")
    assert not_uncertain.code == 3
    assert "not uncertain" in not_uncertain.err
    for flags in ([], ["--sent", "--unsent"]):
        assert cli("outbox", "resolve", sent["key"], *flags).code == 2


def test_outbox_list_columns_and_all(cli: Callable[..., Any], cli_queue: Queue,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    cli_queue(T0, "gone")
    assert cli("dispatch", now=T0).out == "gone\n"
    cli_queue(T0 + 1, "waiting", urgent=False)
    assert [r["body"] for r in outbox_rows(cli)] == ["waiting"]
    rows = outbox_rows(cli, "--all")
    assert [list(r) for r in rows] == [["id", "state", "urgent", "dispatch_key", "created",
                                        "sent", "error", "body", "channel",
                                        "held_reason"]] * 2
    assert [(r["state"], r["sent"], r["created"]) for r in rows] == [("sent", T0, T0),
                                                                     ("held", None, T0 + 1)]
    assert [r["body"] for r in outbox_rows(cli, "--all", "--limit", "1")] == ["waiting"]
    bare = cli("outbox", "--json")
    assert [r["body"] for r in json.loads(bare.out)] == ["waiting"]
    table = cli("outbox", "--all")
    for column in ("id", "state", "urgent", "dispatch_key", "created", "sent", "error"):
        assert column in table.out
    assert "1970-01-12T13:46:41Z" in table.out
    newest = cli("outbox", "--all", "--limit", "1")
    assert "13:46:41Z" in newest.out and "13:46:40Z" not in newest.out  # only the newest


def test_config_settings_are_used_and_flags_override(cli: Callable[..., Any],
                                                     cli_queue: Queue, sender: Any) -> None:
    cli("config", "set", "sender", " ".join(sender.argv))
    cli("config", "set", "outbox_gap", "2h")
    cli_queue(T0, "one")
    assert cli("dispatch", now=T0).out == ""  # the configured sender got it
    cli_queue(T0 + 1, "two")
    assert json.loads(cli("dispatch", "--json", now=T0 + 3600).out)["outcome"] == "waiting"
    overridden = cli("dispatch", "--json", "--gap", "1h", now=T0 + 3600)
    assert json.loads(overridden.out)["outcome"] == "sent"
    assert [c["body"] for c in sender.calls()] == ["one", "two"]


def test_no_sender_with_json_puts_the_body_in_the_document(cli: Callable[..., Any],
                                                            cli_queue: Queue) -> None:
    cli_queue(T0, "a", "b")
    doc = json.loads(cli("dispatch", "--json", now=T0).out)
    assert (doc["outcome"], doc["body"], doc["messages"]) == ("sent", "a\n\nb", [1, 2])


def test_bad_flags_are_usage_errors(cli: Callable[..., Any], cli_queue: Queue) -> None:
    cli_queue(T0, "kept")
    for argv in (["--mode", "exactly-once"], ["--gap", "soon"], ["--timeout", "-1"],
                 ["--via", "x", "--", "y"], ["--via", ""]):
        result = cli("dispatch", *argv, now=T0)
        assert result.code == 2, (argv, result.err)
        assert result.err.startswith("agentbox: error:")
    assert [r["state"] for r in outbox_rows(cli)] == ["held"]


@pytest.mark.sqlite_file  # another writer holds the file's lock (PostgreSQL: tests/postgres)
def test_a_busy_database_exits_75(cli: Callable[..., Any], cli_queue: Queue,
                                  inbox_store: Store,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.backends.sqlite import db

    cli_queue(T0, "blocked")
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)
    inbox_store.engine.conn.execute("BEGIN IMMEDIATE")  # another writer holds the lock throughout
    try:
        result = cli("dispatch", now=T0)
    finally:
        inbox_store.engine.conn.execute("ROLLBACK")
    assert result.code == 75, result.err
    assert "busy" in result.err
    assert result.out == ""
    assert [r["state"] for r in outbox_rows(cli)] == ["held"]
