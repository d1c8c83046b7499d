"""The scenarios can fail: break a rule in the engine and the matching step says so."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agentbox import calendar
from agentbox.ledger import runs
from agentbox.rules.records import Lease


def _failures(cli: Callable[..., Any], token: str) -> list[dict[str, Any]]:
    result = cli("scenarios", token, "--json")
    assert result.code == 1, result.out + result.err
    doc = json.loads(result.out)
    assert doc["ok"] is False
    return [step for step in doc["scenarios"][0]["steps"] if step["ok"] is False]


def test_a_finish_without_the_fence_breaks_the_takeover_case(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Every id counts as ours, on its first attempt, whatever the lease says.
    monkeypatch.setattr(runs, "_fenced", lambda tx, lease, holder, generation, now, ids:
                        dict.fromkeys(ids, 1))
    failed = _failures(cli, "lease-takeover")
    assert [(s["n"], s["label"]) for s in failed] == [
        (9, "A finishes its old claim (gen 1)"), (11, "outbox rows")]
    assert failed[0]["expected"] is False and failed[0]["observed"] is True
    assert failed[1]["observed"] == 2  # the reply queued twice
    human = cli("scenarios", "4")
    assert human.code == 1
    row = next(line for line in human.out.splitlines() if "│ 9. A finishes" in line)
    assert "✗ true" in row  # what it observed instead of the expected false


def _ignores_generation(current: Lease | None, holder: str, generation: int,
                        now: int) -> bool:
    return current is not None and current.holder == holder and current.until >= now


def test_a_fence_on_the_holder_name_alone_breaks_the_same_holder_case(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "holds", _ignores_generation)
    failed = _failures(cli, "same-holder-takeover")
    assert failed[0]["n"] == 5
    assert failed[0]["label"] == "A finishes its generation-1 claim"
    assert failed[0]["observed"] is True


def test_no_dead_letter_rule_breaks_the_poison_case(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "_bury", lambda *args: None)
    failed = _failures(cli, "5")
    assert failed[0]["n"] == 9  # W3 gets the poison event a fourth time
    assert failed[0]["observed"] == ["poison"]
    assert any(s["label"] == "chat/poison: status, attempts" and s["observed"] != ["dead", 3]
               for s in failed)


def test_a_scenario_fails_only_where_it_differs(cli: Callable[..., Any]) -> None:
    """Unbroken, the same scenarios pass: the failures above come from the breakage."""
    for token in ("lease-takeover", "same-holder-takeover", "5", "11", "17"):
        assert cli("scenarios", token).code == 0


def test_a_gap_counting_failed_sends_breaks_the_failed_send_case(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.ledger import outbox
    from agentbox.ledger.engine import Tx

    def any_claim(tx: Tx, channel: str) -> int | None:
        row = tx.one("""SELECT MAX(claimed_at) FROM dispatches
                        WHERE inbox_id = :box AND channel = :channel""", channel=channel)
        return None if row is None or row[0] is None else int(row[0])

    monkeypatch.setattr(outbox, "_last_send", any_claim)
    failed = _failures(cli, "failed-send-held-again")
    assert failed[0]["n"] == 5 and failed[0]["observed"] == "wait"


def test_never_parking_at_most_once_claims_breaks_the_uncertain_case(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from agentbox.ledger import outbox

    monkeypatch.setattr(outbox, "_park_expired", lambda *args: [])
    failed = _failures(cli, "at-most-once-uncertain")
    assert failed[0]["label"] == "count outbox.uncertain" and failed[0]["observed"] == 0


def test_treating_wall_clock_times_as_elapsed_time_breaks_the_dst_cases(
        cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calendar, "_wall_clock", calendar._elapsed)
    spring = _failures(cli, "cron-spring-forward")
    assert spring[0]["label"] == "backup next due, America/New_York time"
    assert spring[0]["observed"] == "2026-03-09T02:30:00-04:00"  # the skipped 02:30 is lost
    fall = _failures(cli, "cron-fall-back")
    assert [s["label"] for s in fall][:2] == ["backup: not again in the repeated hour",
                                              "02:30, second pass"]
    assert fall[1]["observed"] == 1  # a daily backup ran twice in one night
