"""Faults injected into a rehearsal: with a well-behaved handler every promise holds,
and an effect a handler has outside agentbox, repeated after a kill, is named."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from agentbox.errors import UsageError
from agentbox.rehearsal import rehearse
from agentbox.rules.faults import FaultSpec, parse
from agentbox.rules.policy import Policy
from support.rehearsal import agent, day_traffic

SEEDS = range(20)


def test_every_promise_holds_across_twenty_seeds(tmp_path: Path) -> None:
    argv = agent(tmp_path)
    traffic = day_traffic()
    spec = parse("kill=0.2,duplicate=0.1,stall=0.05")
    hit: Counter[str] = Counter()
    for seed in SEEDS:
        report = rehearse(traffic, Policy(), argv, "alice", spec, seed)
        assert [p.name for p in report.promises if not p.held] == [], (seed, report.promises)
        assert report.failures == [], seed
        assert report.exit_code(fail_on_diff=False) == 0
        totals = report.totals
        assert totals["events"] == len(traffic.arrivals)  # a duplicate is not a second one
        hit.update(killed=totals["killed"], stalled=totals["stalled"],
                   duplicates=totals["duplicates"])
        assert report.faults == "kill=0.2,duplicate=0.1,stall=0.05" and report.seed == seed
    # The faults did strike: a test that never killed anything would prove nothing.
    assert hit["killed"] and hit["stalled"] and hit["duplicates"], hit


def test_a_seed_draws_the_same_faults_again(tmp_path: Path) -> None:
    argv = agent(tmp_path)
    spec = FaultSpec(duplicate=0.5, stall=0.3)  # neither depends on the handler's timing
    runs = [[(r.outcome, r.events) for r in rehearse(day_traffic(), Policy(), argv, "alice",
                                                     spec, 7).played.runs]
            for _ in range(2)]
    assert runs[0] == runs[1] and any(o == "stalled" for o, _ in runs[0])


def test_an_effect_outside_agentbox_repeated_after_a_kill_is_named(tmp_path: Path) -> None:
    argv = agent(tmp_path)
    effects = tmp_path / "emails.log"
    for seed in range(5):
        effects.unlink(missing_ok=True)
        report = rehearse(day_traffic(), Policy(), argv, "alice", FaultSpec(kill=0.5), seed,
                          env={**os.environ, "EFFECTS": str(effects)})
        twice = {k for k, n in Counter(effects.read_text().split()).items() if n > 1}
        if twice:
            break
    assert twice, "no seed killed a run after its e-mail went out"
    named = {f"{r.source}/{r.key}" for r in report.repeats}
    assert twice <= named
    for repeat in report.repeats:
        outcomes = [o for _, o in repeat.runs]
        assert "killed" in outcomes[:-1]
    assert all(p.held for p in report.promises)  # at-least-once allows it: no promise broke


@pytest.mark.parametrize("spec", ["kill", "kill=", "kill=-0.1", "kill=1.5", "kill=nan",
                                  "boom=0.1", "kill=0.1,kill=0.2", ""])
def test_a_bad_fault_spec_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError):
        parse(spec)


def test_a_fault_spec_reads_back() -> None:
    spec = parse(" kill=0.2 , stall=0.05")
    assert spec == FaultSpec(kill=0.2, stall=0.05) and spec.any
    assert spec.describe() == "kill=0.2,stall=0.05"
    assert not parse("duplicate=0").any


def test_a_broken_promise_is_named_and_fails(tmp_path: Path) -> None:
    """An arrival the inbox in force refuses (its payload over this max_payload) is lost."""
    report = rehearse(day_traffic(), Policy(max_payload=20), agent(tmp_path), "alice")
    lost = next(p for p in report.promises if p.name == "nothing lost")
    assert not lost.held and any("chat/m1" in said for said in lost.broken)
    assert report.exit_code(fail_on_diff=False) == 1


def test_at_most_once_names_a_dispatch_sent_twice() -> None:
    from agentbox.rehearsal.play import Played, Send
    from agentbox.rehearsal.report import promises

    played = Played(sends=[Send(1, "default", "hi", False, "k-1", n, (1,)) for n in (1, 2)])
    checked = {p.name: p for p in promises(day_traffic(), played, _Empty(), Policy(
        delivery="at-most-once"))}
    assert checked["sent at most once"].broken == ("dispatch k-1 went out 2 times",
                                                   "message 1 went out in k-1, k-1")
    again = {p.name: p for p in promises(day_traffic(), played, _Empty(), Policy())}
    assert again["sent at most once"].held  # at-least-once may resend a key


class _Empty:
    """A store that holds every arrival of the day and no event finished twice."""

    def arrivals(self) -> list[object]:
        from agentbox.rules.records import Event

        return [Event(n, a.source, a.key, a.payload, "done", 1, 1, 0, None, a.at, a.at)
                for n, a in enumerate(day_traffic().arrivals)]

    def finished_twice(self) -> list[tuple[int, int]]:
        return []
