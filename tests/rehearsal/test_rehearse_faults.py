"""Faults injected into a rehearsal: with a well-behaved handler every promise holds,
and an effect a handler has outside agentbox, repeated after a kill, is named."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentbox.errors import UsageError
from agentbox.rehearsal import rehearse
from agentbox.rules.faults import FaultSpec, parse
from agentbox.rules.policy import Policy
from support.rehearsal import agent, day_traffic, stepping_agent

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

    def steps(self, status: str | None = None) -> list[object]:
        return []


def _effects(path: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def test_a_kill_inside_a_step_reruns_it_under_its_key_and_a_done_step_never_again(
        tmp_path: Path) -> None:
    argv = stepping_agent(tmp_path)
    effects = tmp_path / "emails.log"
    inside = 0
    # Which kills land by wall time depends on the machine's load; with the default three
    # attempts a busy machine may kill one event three times and park it dead with its
    # step begun and never done. Attempts to spare keep every event to its end.
    policy = Policy(max_attempts=50)
    for seed in range(6):
        effects.unlink(missing_ok=True)
        report = rehearse(day_traffic(), policy, argv, "alice", FaultSpec(kill=0.5), seed,
                          env={**os.environ, "EFFECTS": str(effects)})
        assert report.failures == [] and all(p.held for p in report.promises), seed
        assert report.totals["dead"] == 0, seed
        struck = [r for r in report.played.runs if "inside step" in (r.error or "")]
        inside += len(struck)
        mailed = _effects(effects)
        tries = Counter(report.played.step_tries)
        assert mailed == tries  # every try the rehearsal saw ran its work, and only those
        assert {s.key: s.tries for s in report.step_repeats} == {
            k: n for k, n in tries.items() if n > 1}
        assert report.totals["steps_done"] == report.totals["steps"] == len(tries)
        assert report.totals["step_tries"] == sum(tries.values())
        attempts: dict[str, list[int]] = {}
        for line in effects.read_text().splitlines():
            key, attempt = line.split()
            attempts.setdefault(key, []).append(int(attempt))
        # each try is a new attempt (a try killed before its work still counts one)
        assert all(a == sorted(set(a)) for a in attempts.values())
    assert inside, "no kill landed inside a step"


def test_at_most_once_a_step_killed_inside_is_parked_and_never_run_again(
        tmp_path: Path) -> None:
    argv = stepping_agent(tmp_path)
    effects = tmp_path / "emails.log"
    for seed in range(10):
        effects.unlink(missing_ok=True)
        report = rehearse(day_traffic(), Policy(), argv, "alice", FaultSpec(kill=0.5), seed,
                          env={**os.environ, "EFFECTS": str(effects),
                               "STEP_MODE": "at-most-once"})
        if report.totals["steps_uncertain"]:
            break
    assert report.totals["steps_uncertain"], "no seed killed a run inside a step"
    assert set(_effects(effects).values()) == {1}  # no e-mail went out twice
    assert all(p.held for p in report.promises)
    assert report.failures and report.exit_code(fail_on_diff=False) == 1  # the parked step
    assert any("uncertain" in (r.error or "") for r in report.failures)


def test_a_done_step_run_again_breaks_its_promise(tmp_path: Path) -> None:
    """The promise reads the journal: a done step whose work ran again is named."""
    from agentbox.rehearsal.report import promises

    argv = stepping_agent(tmp_path)
    effects = tmp_path / "emails.log"
    seen: list[Any] = []

    def check(traffic: Any, played: Any, store: Any, policy: Any) -> Any:
        done = store.steps("done")[0]
        played.step_tries.append(done.key)  # as if its work had run once more
        seen.extend(promises(traffic, played, store, policy))
        return seen

    import agentbox.rehearsal.report as module
    original = module.promises
    module.promises = check
    try:
        rehearse(day_traffic(), Policy(), argv, "alice", None, 0,
                 env={**os.environ, "EFFECTS": str(effects)})
    finally:
        module.promises = original
    broken = {p.name: p.broken for p in seen if not p.held}
    assert list(broken) == ["done steps ran once"]
    assert "ran 2 times; the journal counts 1 tries" in broken["done steps ran once"][0]
