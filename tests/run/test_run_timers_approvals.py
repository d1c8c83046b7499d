"""Timers and approvals through the CLI: the article's cases 6 and 7, and the rules
around them (rule 5: advance in the same transaction, key NAME@time, coalesce or
each; rule 6: one outcome per request, the answer checks the deadline itself)."""

from __future__ import annotations

import json

import pytest

from support.clock import T0

DAY, HOUR = 86400, 3600


def timer_events(store, name: str) -> list[dict]:
    """What a timer fired: each event's key and payload, oldest first."""
    return [{"key": e.source_id, **json.loads(e.payload)} for e in store.timer_events(name)]


def tick(cli, now: int) -> int:
    result = cli("schedule", "tick", "--json", now=now)
    assert result.code == 0, result.err
    return json.loads(result.out)["due"]


def listed(cli, *flags: str, now: int = T0) -> dict[str, dict]:
    result = cli("schedule", "list", "--json", *flags, now=now)
    assert result.code == 0, result.err
    return {t["name"]: t for t in json.loads(result.out)}


def test_case_6_second_pass_replay_and_outage(cli, open_inbox):
    digest = ("schedule", "add", "digest", "--every", "1d", "--payload",
              '{"task": "daily digest"}')
    assert cli(*digest, now=T0).out.startswith("added timer digest")
    assert (tick(cli, T0), tick(cli, T0)) == (1, 0)  # pass 1: 1  pass 2: 0

    # A deploy re-registers the schedule at its old due time: one due, still one event.
    replaced = cli(*digest, "--replace", now=T0)
    assert replaced.code == 0 and replaced.out.startswith("replaced timer digest")
    assert tick(cli, T0) == 1
    store = open_inbox()
    assert len(timer_events(store, "digest")) == 1

    later = T0 + DAY + 3 * DAY + 600  # the next due time, plus a three-day outage
    assert tick(cli, later) == 1
    events = timer_events(store, "digest")
    assert len(events) == 2
    last = events[-1]
    assert (last["skipped"], last["late_by"] // 60) == (3, 10)
    assert last["task"] == "daily digest" and last["key"] == f"digest@{last['scheduled_for']}"
    due = listed(cli, now=later)["digest"]["due"]
    assert round((due - later) / HOUR, 1) == 23.8


def answer(cli, request_id: str, reply: str, now: int) -> tuple[int, str]:
    result = cli("approve", "answer", request_id, reply, "--json", now=now)
    doc = json.loads(result.out)
    assert doc["stands"] == (result.code == 0)
    return result.code, doc["outcome"]


def request(cli, request_id: str, now: int, action: str | None = None) -> None:
    result = cli("approve", "request", request_id, "--expires-in", "4h", "--action",
                 action or f"refund order {request_id}", now=now)
    assert result.code == 0, result.err


def test_case_7_approvals_with_a_four_hour_window(cli, open_inbox):
    start = T0 + 5 * DAY
    request(cli, "refund-881", start)
    assert tick(cli, start + 5 * HOUR) == 1
    assert answer(cli, "refund-881", "yes", start + 6 * HOUR) == (3, "expired")

    request(cli, "refund-882", start)  # the scheduler has not run for this one
    assert answer(cli, "refund-882", "yes", start + 5 * HOUR) == (3, "expired")

    request(cli, "refund-883", start)
    assert answer(cli, "refund-883", "yes", start + HOUR) == (0, "yes")
    assert answer(cli, "refund-883", "no", start + 2 * HOUR) == (3, "yes")
    assert tick(cli, start + 5 * HOUR) == 2  # the expiry timers of 882 and 883 fire
    store = open_inbox()
    event = store.find("approval", "refund-883")
    assert json.loads(event.payload)["answer"] == "yes"
    assert answer(cli, "refund-883", "yes", start + 6 * HOUR) == (0, "yes")

    assert answer(cli, "refund-999", "yes", start) == (3, "unknown")

    listing = cli("approve", "list", "--json", now=start + 6 * HOUR)
    outcomes = {a["id"]: a["outcome"] for a in json.loads(listing.out)}
    assert outcomes == {"refund-881": "expired", "refund-882": "expired", "refund-883": "yes"}
    # Only one outcome per request was ever stored.
    count = store.engine.conn.execute("SELECT COUNT(*) FROM events WHERE source = 'approval'")
    assert count.fetchone()[0] == 3


def test_answer_prints_the_outcome_that_stands(cli):
    request(cli, "r1", T0)
    first = cli("approve", "answer", "r1", "no", now=T0 + 60)
    assert (first.code, first.out) == (0, "r1: no\n")
    second = cli("approve", "answer", "r1", "yes", now=T0 + 120)
    assert second.code == 3
    assert second.out == "r1: no; an earlier answer stands, your yes was not recorded\n"
    late = cli("approve", "answer", "r2", "yes", now=T0)
    assert (late.code, late.out) == (3, "r2: unknown; no such approval was requested\n")
    request(cli, "r3", T0)
    expired = cli("approve", "answer", "r3", "yes", now=T0 + 4 * HOUR)
    assert expired.code == 3 and expired.out.startswith("r3: expired")
    assert cli("approve", "answer", "r1", "maybe", now=T0).code == 2


def test_requesting_again(cli):
    request(cli, "r1", T0, "refund 1")
    again = cli("approve", "request", "r1", "--expires-in", "1h", "--action", "refund 1",
                "--json", now=T0 + 60)
    assert again.code == 0
    doc = json.loads(again.out)
    assert (doc["outcome"], doc["expires_at"]) == ("unchanged", T0 + 4 * HOUR)
    other = cli("approve", "request", "r1", "--expires-in", "4h", "--action", "refund 2",
                now=T0)
    assert other.code == 3 and "the first request stands" in other.out
    bad = cli("approve", "request", "r2", "--expires-in", "soon", "--action", "x", now=T0)
    assert bad.code == 2
    assert cli("approve", "request", "r2", "--action", "x", now=T0).code == 2


def test_an_approval_expiry_cannot_be_removed(cli):
    request(cli, "r1", T0)
    result = cli("schedule", "remove", "expire:r1", now=T0)
    assert result.code == 3 and "expiry of approval 'r1'" in result.err
    assert "expire:r1" in listed(cli)


def test_an_approval_expiry_cannot_be_replaced_nor_its_name_taken(cli):
    mine = cli("schedule", "add", "expire:r2", "--at", "+1h", now=T0)
    assert mine.code == 65
    assert mine.err == ("agentbox: error: timer names beginning 'expire:' are kept for "
                        "approvals' expiries\n")
    request(cli, "r1", T0)
    due = listed(cli)["expire:r1"]["due"]
    replaced = cli("schedule", "add", "expire:r1", "--at", "+10d", "--replace", now=T0)
    assert replaced.code == 65
    assert listed(cli)["expire:r1"]["due"] == due  # the request still comes back on time


def test_re_adding_a_timer(cli):
    add = ("schedule", "add", "digest", "--every", "1d")
    assert cli(*add, now=T0).code == 0
    same = cli(*add, now=T0 + 500)  # a later deploy: no change, no re-arm
    assert (same.code, same.out) == (0, "timer digest unchanged\n")
    assert listed(cli)["digest"]["due"] == T0
    changed = cli("schedule", "add", "digest", "--every", "12h", now=T0)
    assert changed.code == 3
    assert "exists with a different schedule or payload; use --replace" in changed.err
    assert listed(cli)["digest"]["every"] == DAY
    assert cli("schedule", "add", "digest", "--every", "12h", "--replace", now=T0).code == 0
    assert listed(cli)["digest"]["every"] == 12 * HOUR


def test_first_due_times_and_one_off_timers(cli, open_inbox):
    assert cli("schedule", "add", "now-ish", "--every", "1h", now=T0).code == 0
    assert cli("schedule", "add", "later", "--every", "1h", "--start", "+30m", now=T0).code == 0
    assert cli("schedule", "add", "once", "--at", str(T0 + 60), "--payload", '{"a": 1}',
               now=T0).code == 0
    timers = listed(cli)
    assert {n: (t["due"], t["every"]) for n, t in timers.items()} == {
        "now-ish": (T0, HOUR), "later": (T0 + 1800, HOUR), "once": (T0 + 60, None)}
    assert timers["once"]["payload"] == {"a": 1} and timers["once"]["catch_up"] == "coalesce"
    assert tick(cli, T0 + 59) == 1  # now-ish at T0
    assert tick(cli, T0 + 2000) == 2  # once, later
    assert "once" not in listed(cli) and listed(cli, "--all")["once"]["done"] is True
    [once] = timer_events(open_inbox(), "once")
    assert (once["a"], once["late_by"], once["skipped"]) == (1, 1940, 0)


def test_catch_up_each_is_bounded(cli, open_inbox):
    assert cli("config", "set", "catch_up_limit", "3").code == 0
    assert cli("schedule", "add", "billing", "--every", "1h", "--catch-up", "each",
               now=T0).code == 0
    assert cli("schedule", "add", "small", "--every", "1h", "--catch-up", "each",
               now=T0).code == 0
    assert tick(cli, T0) == 2
    assert tick(cli, T0 + 2 * HOUR + 5) == 2  # small: two missed, within the bound
    assert tick(cli, T0 + 7 * HOUR + 5) == 2  # billing: five missed, over the bound
    store = open_inbox()
    small = timer_events(store, "small")
    assert [(e["scheduled_for"] - T0, e["skipped"]) for e in small][1:3] == [
        (HOUR, 0), (2 * HOUR, 0)]
    billing = timer_events(store, "billing")
    assert [(e["scheduled_for"] - T0, e["skipped"]) for e in billing] == [
        (0, 0), (HOUR, 0), (2 * HOUR, 0), (3 * HOUR, 0), (4 * HOUR, 0), (7 * HOUR, 2)]
    assert [e["key"] for e in billing][-1] == f"billing@{T0 + 7 * HOUR}"
    assert listed(cli, now=T0 + 7 * HOUR)["billing"]["due"] == T0 + 8 * HOUR


@pytest.mark.parametrize(("argv", "code"), [
    (["--every", "1d", "--at", "now"], 2),
    ([], 2),
    (["--at", "now", "--start", "now"], 2),
    (["--every", "1d", "--catch-up", "sometimes"], 2),
    (["--every", "often"], 2),
    (["--at", "tomorrow-ish"], 2),
    (["--every", "1d", "--payload", "[1]"], 65),
    (["--every", "1d", "--payload", '{"skipped": 1}'], 65),
])
def test_bad_schedules_are_refused(cli, argv, code):
    result = cli("schedule", "add", "t", *argv, now=T0)
    assert result.code == code
    assert result.err.count("\n") == 1
    assert listed(cli) == {}


def test_remove(cli):
    assert cli("schedule", "add", "t", "--every", "1h", now=T0).code == 0
    assert cli("schedule", "remove", "t", now=T0).out == "removed timer t\n"
    assert listed(cli) == {}
    missing = cli("schedule", "remove", "t", now=T0)
    assert missing.code == 65 and "no timer named 't'" in missing.err
