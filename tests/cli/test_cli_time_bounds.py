"""The clock and every time a command computes stay within the years 1970 to 9999.

A clock outside them, or a time a command would compute past them, is bad
input (65, one line) and stores nothing, so whatever far-future or nonsense
clocks a shell once ran under, the next command on the real clock works. A
timer row an older version wrote with an impossible time is shown as a number
and passed over by the scheduler without failing it. On both backends.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0

LAST = 253_402_300_799  # 9999-12-31T23:59:59Z
QUIET = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # answers nothing


def bad_input(result: Any, *words: str) -> None:
    assert result.code == 65, (result.out, result.err)
    assert "Traceback" not in result.err and len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("agentbox: error: ")
    for word in words:
        assert word in result.err, result.err


def listed(cli: Any, *argv: str) -> Any:
    result = cli(*argv, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


@pytest.mark.parametrize("pinned", [" 5", "5 ", "-5", "+5", "5_000", "1e3", "٣",
                                    str(LAST + 1), str(2**63 - 1), str(-(2**40))])
def test_a_clock_outside_the_range_or_not_plain_digits_is_bad_input(
        cli: Any, backend_name: str, monkeypatch: pytest.MonkeyPatch, pinned: str) -> None:
    monkeypatch.setenv("AGENTBOX_NOW", pinned)
    for argv in (["ingest", "chat", "m1"], ["schedule", "add", "t", "--every", "1h"],
                 ["run", "--", *QUIET], ["schedule", "tick"]):
        bad_input(cli(*argv), "AGENTBOX_NOW", "plain decimal digits")
    monkeypatch.delenv("AGENTBOX_NOW")
    assert listed(cli, "events") == [] and listed(cli, "schedule", "list") == []


def test_far_and_nonsense_clocks_leave_nothing_a_later_command_fails_on(
        cli: Any, backend_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("schedule", "add", "far", "--at", "9999-12-31T23:59:59Z").code == 0
    assert cli("schedule", "add", "farev", "--every", "36500d",
               "--start", "9999-12-31T23:59:59Z").code == 0
    for n, pinned in enumerate((str(LAST), str(2**63 - 1), str(-(2**40)))):
        monkeypatch.setenv("AGENTBOX_NOW", pinned)
        for argv in (["run", "--", *QUIET], ["schedule", "tick"], ["ingest", "chat", f"m{n}"],
                     ["approve", "request", f"a{n}", "--expires-in", "1h", "--action", "go"],
                     ["dispatch"], ["status"], ["schedule", "list"]):
            result = cli(*argv)
            if result.code != 0:
                bad_input(result)
    monkeypatch.delenv("AGENTBOX_NOW")  # the real clock again
    ran = cli("run", "--", *QUIET)
    assert ran.code == 0, ran.err
    timers = listed(cli, "schedule", "list")
    assert timers == []  # both fired at the last second of 9999 and are spent
    spent = listed(cli, "schedule", "list", "--all")
    assert {t["name"]: (t["due"], t["done"]) for t in spent} == {
        "far": (LAST, True), "farev": (LAST, True)}
    assert listed(cli, "approve", "list") == []  # at 9999-12-31T23:59:59, 1h is too far
    events = listed(cli, "events")
    assert all(0 <= e["created_at"] <= LAST for e in events)
    assert sorted(e["source_id"] for e in events if e["source"] == "chat") == ["m0"]
    assert cli("status").code == 0 and cli("schedule", "list").code == 0


def test_a_time_flag_past_9999_is_bad_input(cli: Any, backend_name: str) -> None:
    for flags in (["--at", "+1s"], ["--every", "1d", "--start", "+1s"],
                  ["--at", "99999999999999999999"], ["--at", "0001-01-01T00:00+01:00"],
                  ["--at", "-5"]):
        bad_input(cli("schedule", "add", "x", *flags, now=LAST), flags[-2],
                  "outside the years 1970 to 9999")
    bad_input(cli("approve", "request", "a1", "--expires-in", "1s", "--action", "go",
                  now=LAST), "approval 'a1' would expire")
    assert listed(cli, "schedule", "list", "--all") == []
    assert listed(cli, "approve", "list") == []


def test_a_follow_up_past_9999_fails_the_run_and_stores_no_timer(
        cli: Any, backend_name: str) -> None:
    now = LAST - 1000
    assert cli("ingest", "chat", "m1", now=now).code == 0
    answer = json.dumps({"timers": [{"name": "later", "in": "36500d"}]})
    ran = cli("run", "--", sys.executable, "-c",
              f"import sys; sys.stdin.read(); print({answer!r})", now=now)
    assert ran.code == 1
    assert "handler answer could not be applied: timer 'later' would be due" in ran.err
    assert listed(cli, "schedule", "list", "--all") == []
    [event] = listed(cli, "events")
    assert event["status"] == "pending"


BIG = 2**63 - 1
OLD_ROWS = [  # (name, due, every, cron, tz): what a version without the bounds could write
    ("once-big", BIG, None, None, None), ("once-small", -(2**63), None, None, None),
    ("every-small", -(2**63), 60, None, None), ("every-past", LAST + 5, 86_400, None, None),
    ("cron-big", BIG, None, "* * * * *", "Europe/Berlin"),
    ("cron-small", -(2**63), None, "0 8 * * *", "Europe/Berlin"),
    ("cron-1969", -5000, None, "0 8 * * *", "UTC"),
]


@pytest.mark.sqlite_file  # rows written into the file as an older version could
def test_times_an_older_version_stored_out_of_range_neither_crash_nor_spread(
        cli: Any, home: Path) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0  # makes alice's file
    conn = sqlite3.connect(home / "inboxes" / "alice.sqlite3")
    with conn:
        conn.executemany(
            "INSERT INTO timers (name, due, every, payload, catch_up, done, created_at, cron, "
            "tz) VALUES (?, ?, ?, '{}', 'each', 0, ?, ?, ?)",
            [(name, due, every, -(2**63), cron, tz) for name, due, every, cron, tz in OLD_ROWS])
        conn.execute("INSERT INTO approvals (id, action, requested_at, expires_at) "
                     "VALUES ('a1', 'go', ?, ?)", (-(2**63), BIG))
    conn.close()
    now = 1_700_000_000
    for argv in (["schedule", "list"], ["schedule", "list", "--json"], ["status"],
                 ["status", "--json"], ["approve", "list"], ["metrics"]):
        shown = cli(*argv, now=now)
        assert shown.code == 0, (argv, shown.err)
    assert str(BIG) in cli("schedule", "list", now=now).out
    ticked = cli("schedule", "tick", now=now)
    assert ticked.code == 0, ticked.err
    ran = cli("run", "--", *QUIET, now=now)
    assert ran.code == 0, ran.err
    fired = [e["payload"] for e in listed(cli, "events") if e["source"] == "timer"]
    assert fired and all(0 <= p["scheduled_for"] <= now for p in fired), fired
    # the ones that were due fired and moved on to a time in range, or are spent;
    # the others are left as they were, to be shown as numbers
    stored = {name: due for name, due, *_ in OLD_ROWS}
    for timer in listed(cli, "schedule", "list", "--all"):
        if stored[timer["name"]] <= now:
            assert timer["done"] or 0 <= timer["due"] <= LAST, timer
        else:
            assert (timer["due"], timer["done"]) == (stored[timer["name"]], False)


@pytest.mark.sqlite_file  # rows written into the file as an older version could
def test_a_lease_an_older_version_stored_out_of_range_is_shown_as_its_number(
        cli: Any, home: Path) -> None:
    assert cli("run", "--", *QUIET, now=T0).code == 0  # takes and releases the lease
    conn = sqlite3.connect(home / "inboxes" / "alice.sqlite3")
    with conn:
        conn.execute("UPDATE inboxes SET lease_until = ?, lease_released = 0", (BIG,))
    conn.close()
    shown = cli("status", now=T0)
    assert shown.code == 0, shown.err
    assert str(BIG) in shown.out
    assert listed(cli, "status")["lease"]["until"] == BIG
    busy = cli("run", "--", *QUIET, now=T0)  # it is held, as far as anyone can tell
    assert busy.code == 75 and f"until {BIG})" in busy.err
    doctor = cli("doctor", now=T0)
    assert doctor.code == 0 and "held by" in doctor.out, doctor.out
