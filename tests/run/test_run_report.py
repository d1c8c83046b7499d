"""A failed run says what became of each event: retried (which attempt, and when), or dead."""

from __future__ import annotations

import json

from support.clock import T0
from support.fixtures import Cli


def test_each_failure_says_retry_or_dead(cli: Cli, handler: list[str]) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    said = []
    for n in range(3):
        result = cli("run", "--", *handler, "--exit", "1", now=T0 + n)
        assert result.code == 1
        said.append(result.out.strip())
    assert said[0] == "generation 1: event 1 will retry (attempt 1 of 3 failed)"
    assert said[1] == "generation 2: event 1 will retry (attempt 2 of 3 failed)"
    assert said[2] == "generation 3: event 1 is dead after 3 of 3 attempts"


def test_a_batch_groups_events_with_the_same_fate(cli: Cli, handler: list[str]) -> None:
    assert cli("config", "set", "max_attempts", "2").code == 0
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    assert cli("run", "--", *handler, "--exit", "1", now=T0).code == 1  # m1: attempt 1
    for source_id in ("m2", "m3"):
        assert cli("ingest", "chat", source_id, now=T0).code == 0
    # The retried m1 is claimed alone; then m2 and m3 fail together on their first try.
    alone = cli("run", "--", *handler, "--exit", "1", now=T0 + 1)
    assert alone.out.strip() == "generation 2: event 1 is dead after 2 of 2 attempts"
    pair = cli("run", "--json", "--", *handler, "--exit", "1", now=T0 + 2)
    [report] = json.loads(pair.out)["runs"]
    assert report["events_after"] == [
        {"id": 2, "status": "pending", "attempts": 1, "retry_at": None},
        {"id": 3, "status": "pending", "attempts": 1, "retry_at": None}]
    assert report["max_attempts"] == 2


def test_a_retry_held_back_says_until_when(cli: Cli, handler: list[str]) -> None:
    assert cli("config", "set", "retry_backoff", "60").code == 0
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    result = cli("run", "--", *handler, "--exit", "1", now=T0)
    assert result.out.strip() == ("generation 1: event 1 will retry (attempt 1 of 3 failed), "
                                  "not before 1970-01-12T13:47:40Z")
    doc = json.loads(cli("run", "--json", "--", *handler, now=T0 + 1).out)
    assert doc["runs"][0]["outcome"] == "idle"  # held back, as said


def test_describe_names_events_that_share_a_fate_together() -> None:
    from agentbox.worker import EventAfter, RunReport

    report = RunReport("failed", 1, 7, (4, 5, 6), events_after=(
        EventAfter(4, "dead", 3, None), EventAfter(5, "pending", 1, None),
        EventAfter(6, "pending", 1, None)), max_attempts=3)
    assert report.describe() == ("generation 7: event 4 is dead after 3 of 3 attempts; "
                                 "events 5, 6 will retry (attempt 1 of 3 failed)")
    unread = RunReport("failed", 1, 7, (4,), max_attempts=3)
    assert unread.describe() == "generation 7: 1 event(s) (4) failed and will retry or go dead"
