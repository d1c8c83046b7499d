"""Store contract: the agent's state moves with the fenced finish; the journal of steps
fences, memoizes and settles each KEY."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, parse
from agentbox.rules.policy import Policy
from agentbox.rules.records import Entry
from agentbox.rules.state import Change
from agentbox.rules.steps import Begun, Outcome, Step, step_key
from support.clock import T0, TTL
from support.store import POLICY, unsign_state

LAPSED = TTL + 1  # a lease taken this long after the last one is a takeover


def _claimed(store: Store, holder: str, now: int) -> tuple[int, list[int]]:
    store.ingest("chat", f"{holder}{now}", "{}", now)
    generation = store.acquire(holder, now, TTL)
    assert generation is not None
    events = store.claim(holder, generation, now, POLICY)
    assert events is not None
    return generation, [e.id for e in events]


def test_a_new_inbox_has_the_empty_state_at_version_0(backend: Store) -> None:
    state = backend.state()
    assert (state.version, state.value(), state.updated_at) == (0, {}, None)
    assert backend.state_history() == []


def test_a_finish_replaces_or_merges_the_state_and_bumps_its_version(backend: Store) -> None:
    gen, ids = _claimed(backend, "A", T0)
    assert backend.finish("A", gen, T0, ids, parse('{"state": {"a": {"b": 1, "c": 2}}}'))
    gen, ids = _claimed(backend, "A", T0 + 1)
    assert backend.finish("A", gen, T0 + 1, ids,
                          parse('{"state_patch": {"a": {"b": null, "d": [1]}, "e": "x"}}'))
    state = backend.state()
    assert state.value() == {"a": {"c": 2, "d": [1]}, "e": "x"}
    assert (state.version, state.updated_at, state.generation, state.author) == (
        2, T0 + 1, gen, "run")
    gen, ids = _claimed(backend, "A", T0 + 2)
    assert backend.finish("A", gen, T0 + 2, ids)  # no state in the answer: no new version
    assert backend.state().version == 2
    assert [v.version for v in backend.state_history()] == [2, 1]


def test_a_refused_failed_or_oversized_finish_changes_no_state(backend: Store) -> None:
    gen, ids = _claimed(backend, "A", T0)
    assert backend.finish("A", gen, T0, ids, parse('{"state": {"n": 1}}'))
    before = backend.state()
    gen, ids = _claimed(backend, "A", T0 + 1)
    assert not backend.finish("B", gen, T0 + 1, ids, Answer(state=Change(replace={"n": 2})))
    assert backend.fail("A", gen, T0 + 1, ids, "boom", POLICY)
    small = Policy(max_state=20)
    gen, ids = _claimed(backend, "A", T0 + 2)
    with pytest.raises(BadInput, match="max_state"):
        backend.finish("A", gen, T0 + 2, ids, Answer(state=Change(patch={"x": "y" * 30})),
                       small)
    assert backend.state() == before


def test_history_keeps_keep_state_versions(backend: Store) -> None:
    policy = Policy(keep_state_versions=3)
    for n in range(5):
        gen, ids = _claimed(backend, "A", T0 + n)
        assert backend.finish("A", gen, T0 + n, ids, parse(f'{{"state": {{"n": {n}}}}}'),
                              policy)
    assert [v.version for v in backend.state_history()] == [5, 4, 3]
    assert backend.state().value() == {"n": 4}


def test_an_operator_sets_the_state_only_under_the_lease(backend: Store) -> None:
    assert backend.acquire("op", T0, TTL) == 1
    assert backend.set_state("op", 1, T0, {"k": "v"}, POLICY) == 1
    assert backend.set_state("other", 1, T0, {"k": "w"}, POLICY) is None
    assert backend.state().author == "operator"
    assert backend.state().value() == {"k": "v"}


def test_a_version_with_no_generation_is_read_as_none(backend: Store) -> None:
    """Every version agentbox writes names its generation, but the column may be empty in
    a file edited by hand (or restored from one): such a version reads as written by
    no generation, not as an error."""
    assert backend.acquire("op", T0, TTL) == 1
    assert backend.set_state("op", 1, T0, {"k": "v"}, POLICY) == 1
    unsign_state(backend)
    assert backend.state().generation is None
    assert [(v.version, v.generation) for v in backend.state_history()] == [(1, None)]


def test_an_operators_state_names_its_lease_and_says_so_in_its_story(backend: Store) -> None:
    """A state set by an operator is a version written under the generation of the lease
    taken for it; its story is one ``set`` line under that generation, ``by an operator``."""
    assert backend.acquire("op", T0, TTL) == 1
    assert backend.acquire("op", T0 + LAPSED, TTL) == 2
    assert backend.set_state("op", 2, T0 + LAPSED, {"k": "v"}, POLICY) == 1
    state = backend.state()
    assert (state.version, state.updated_at, state.generation, state.author) == (
        1, T0 + LAPSED, 2, "operator")
    assert backend.history("state", 1) == [Entry(T0 + LAPSED, "state", "1", "set", 2,
                                                 "by an operator")]
    assert backend.set_state("op", 2, T0 + LAPSED + 1, {"k": "w"}, POLICY) == 2
    assert [e.action for e in backend.history("state", 2)] == ["set"]


def test_answers_with_both_or_a_non_object_state_are_malformed() -> None:
    with pytest.raises(BadInput, match="both"):
        parse('{"state": {}, "state_patch": {}}')
    with pytest.raises(BadInput, match="state_patch must be an object"):
        parse('{"state_patch": [1]}')
    assert parse('{"state_patch": {"a": null}}').state == Change(patch={"a": None})


def test_a_step_runs_once_then_is_a_memo(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    begun = backend.begin_step("A", 1, "k1", T0, "at-least-once")
    assert (begun.action, begun.attempt) == ("run", 1)
    assert backend.end_step("k1", 1, 1, Outcome("done", 0, b"out\n", None), T0 + 1)
    memo = backend.begin_step("A", 1, "k1", T0 + 2, "at-least-once")
    assert (memo.action, memo.output) == ("memo", b"out\n")
    step = backend.step("k1")
    assert step is not None and (step.status, step.attempts, step.finished_at) == (
        "done", 1, T0 + 1)


def test_the_journal_records_every_try_and_its_end(backend: Store) -> None:
    """A step reads back as its tries left it: begun (when, by which generation, which
    attempt), failed (its exit code and error, no output), begun again (the last end
    cleared), done (its output; none given is empty). Each begin and end is a line of
    its story, under the generation that made it."""
    assert backend.acquire("A", T0, TTL) == 1
    assert backend.begin_step("A", 1, "k", T0, "at-least-once") == Begun("run", 1)
    assert backend.step("k") == Step("k", "started", 1, 1, T0, None, None, None, None)
    assert backend.end_step("k", 1, 1, Outcome("failed", 3, None, "exit 3"), T0 + 1)
    assert backend.step("k") == Step("k", "failed", 1, 1, T0, T0 + 1, 3, None, "exit 3")
    assert backend.acquire("B", T0 + LAPSED, TTL) == 2
    assert backend.begin_step("B", 2, "k", T0 + LAPSED, "at-most-once") == Begun("run", 2)
    assert backend.step("k") == Step("k", "started", 2, 2, T0 + LAPSED, None, None, None,
                                     None)
    assert not backend.end_step("k", 2, 1, Outcome("done", 0, b"", None), T0 + LAPSED)
    assert not backend.end_step("k", 1, 2, Outcome("done", 0, b"", None), T0 + LAPSED)
    assert backend.end_step("k", 2, 2, Outcome("done", 0, None, None), T0 + LAPSED + 1)
    assert backend.step("k") == Step("k", "done", 2, 2, T0 + LAPSED, T0 + LAPSED + 1, 0,
                                     None, None)
    assert backend.begin_step("B", 2, "k", T0 + LAPSED + 2, "at-most-once") == Begun(
        "memo", 2, b"")
    assert backend.history("step", "k") == [
        Entry(T0, "step", "k", "started", 1, "attempt 1"),
        Entry(T0 + 1, "step", "k", "failed", 1, "attempt 1; exit 3"),
        Entry(T0 + LAPSED, "step", "k", "started", 2, "attempt 2"),
        Entry(T0 + LAPSED + 1, "step", "k", "done", 2, "attempt 2")]
    assert backend.step("nothing") is None


def test_a_step_is_parked_uncertain_once_with_its_reason(backend: Store) -> None:
    """An at-most-once step found ``started`` by a later try is parked ``uncertain`` at
    that time, with the reason as its error and one line in its story; trying it again
    runs nothing and writes nothing more."""
    assert backend.acquire("A", T0, TTL) == 1
    backend.begin_step("A", 1, "once", T0, "at-most-once")
    later = T0 + LAPSED
    assert backend.acquire("B", later, TTL) == 2
    assert backend.begin_step("B", 2, "once", later, "at-most-once") == Begun("uncertain", 1)
    parked = Step("once", "uncertain", 1, 1, T0, later, None, None,
                  "started, never finished (at-most-once)")
    assert backend.step("once") == parked
    story = [Entry(T0, "step", "once", "started", 1, "attempt 1"),
             Entry(later, "step", "once", "uncertain", 2, "attempt 1 never finished")]
    assert backend.history("step", "once") == story
    assert backend.begin_step("B", 2, "once", later + 1, "at-least-once") == Begun(
        "uncertain", 1)
    assert backend.step("once") == parked
    assert backend.history("step", "once") == story


def test_the_latest_tries_of_the_journal_are_a_bounded_page(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    for n, key in enumerate(("k3", "k1", "k2", "k0")):
        assert backend.begin_step("A", 1, key, T0 + n, "at-least-once").action == "run"
    backend.end_step("k1", 1, 1, Outcome("done", 0, b"", None), T0 + 5)
    assert [s.key for s in backend.steps()] == ["k3", "k1", "k2", "k0"]
    assert [s.key for s in backend.steps(latest=2)] == ["k2", "k0"]
    assert [s.key for s in backend.steps("started", latest=2)] == ["k2", "k0"]
    assert [s.key for s in backend.steps("done", latest=5)] == ["k1"]
    assert [s.key for s in backend.steps("started", latest=3)] == ["k3", "k2", "k0"]


def test_a_failed_step_runs_again_as_the_next_attempt(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    backend.begin_step("A", 1, "k", T0, "at-most-once")
    assert backend.end_step("k", 1, 1, Outcome("failed", 3, None, "exit 3"), T0)
    assert backend.begin_step("A", 1, "k", T0, "at-most-once").attempt == 2


def test_the_fence_refuses_a_step_without_the_lease(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    assert backend.begin_step("A", 1, "k", T0 + TTL + 1, "at-least-once").action == "fenced"
    assert backend.acquire("B", T0 + TTL + 1, TTL) == 2
    assert backend.begin_step("A", 1, "k", T0 + TTL + 1, "at-least-once").action == "fenced"
    assert backend.step("k") is None


def test_a_step_that_died_inside_runs_again_or_is_parked(backend: Store) -> None:
    assert backend.acquire("A", T0, TTL) == 1
    backend.begin_step("A", 1, "again", T0, "at-least-once")
    backend.begin_step("A", 1, "once", T0, "at-most-once")
    later = T0 + TTL + 1
    assert backend.acquire("B", later, TTL) == 2
    again = backend.begin_step("B", 2, "again", later, "at-least-once")
    assert (again.action, again.attempt) == ("run", 2)
    assert backend.begin_step("B", 2, "once", later, "at-most-once").action == "uncertain"
    assert backend.begin_step("B", 2, "once", later, "at-least-once").action == "uncertain"
    # the stale try's end is refused: a newer try of its KEY began
    assert not backend.end_step("again", 1, 1, Outcome("done", 0, b"", None), later)
    assert [s.key for s in backend.steps("uncertain")] == ["once"]
    assert backend.resolve_step("once", True, b"sent", later) == "uncertain"
    assert backend.begin_step("B", 2, "once", later, "at-most-once").output == b"sent"
    assert backend.resolve_step("once", False, None, later) == "done"  # left as it is
    assert backend.resolve_step("nothing", False, None, later) is None


def _parked(store: Store) -> int:
    """Steps ``once`` (at-most-once) and ``again`` (at-least-once) begun by A and never
    ended; B takes over at the returned time and parks ``once`` as uncertain."""
    assert store.acquire("A", T0, TTL) == 1
    store.begin_step("A", 1, "once", T0, "at-most-once")
    store.begin_step("A", 1, "again", T0, "at-least-once")
    later = T0 + TTL + 1
    assert store.acquire("B", later, TTL) == 2
    assert store.begin_step("B", 2, "once", later, "at-most-once").action == "uncertain"
    return later


def test_resolving_done_records_the_output_and_the_operators_line(backend: Store) -> None:
    """An operator's ``done`` settles the step done at that time, with the output given
    (none given: empty) and no exit code or error; its story says ``resolved``, ``done``,
    under no generation. A step left ``started`` may be resolved as well."""
    later = _parked(backend)
    assert backend.resolve_step("once", True, b"sent", later + 5) == "uncertain"
    step = backend.step("once")
    assert step is not None
    assert (step.status, step.finished_at, step.exit_code, step.output, step.error) == (
        "done", later + 5, None, b"sent", None)
    assert backend.history("step", "once")[-1] == Entry(later + 5, "step", "once", "resolved",
                                                        None, "done")
    assert backend.resolve_step("again", True, None, later + 6) == "started"
    step = backend.step("again")
    assert step is not None and (step.status, step.output, step.error) == ("done", b"", None)
    assert backend.history("step", "again")[-1].action == "resolved"
    memo = backend.begin_step("B", 2, "again", later + 7, "at-least-once")
    assert (memo.action, memo.output) == ("memo", b"")


def test_resolving_not_done_fails_the_step_so_a_later_try_runs_it(backend: Store) -> None:
    """An operator's ``not done`` settles the step failed at that time, with no output and
    the operator's word as its error; its story says ``resolved``, ``not done``; the next
    try runs it as its next attempt."""
    later = _parked(backend)
    assert backend.resolve_step("once", False, b"ignored", later + 5) == "uncertain"
    step = backend.step("once")
    assert step is not None
    assert (step.status, step.finished_at, step.exit_code, step.output, step.error) == (
        "failed", later + 5, None, None, "resolved not done by an operator")
    assert backend.history("step", "once")[-1] == Entry(later + 5, "step", "once", "resolved",
                                                        None, "not done")
    assert [s.key for s in backend.steps("failed")] == ["once"]
    begun = backend.begin_step("B", 2, "once", later + 6, "at-most-once")
    assert (begun.action, begun.attempt) == ("run", 2)
    assert backend.resolve_step("once", False, None, later + 7) == "started"


def test_a_stale_try_that_finished_keeps_its_result(backend: Store) -> None:
    """The end of a step is not fenced: its effect happened, the result is kept."""
    assert backend.acquire("A", T0, TTL) == 1
    backend.begin_step("A", 1, "k", T0, "at-least-once")
    assert backend.acquire("B", T0 + TTL + 1, TTL) == 2
    assert backend.end_step("k", 1, 1, Outcome("done", 0, b"r", None), T0 + TTL + 2)
    assert backend.begin_step("B", 2, "k", T0 + TTL + 3, "at-least-once").action == "memo"


def test_step_keys_are_bounded_and_the_env_key_is_per_inbox(backend: Store,
                                                            other_backend: Store) -> None:
    with pytest.raises(BadInput):
        backend.begin_step("A", 1, "", T0, "at-least-once")
    with pytest.raises(BadInput):
        backend.begin_step("A", 1, "x" * 201, T0, "at-least-once")
    mine = step_key(backend.instance_id(), "k")
    assert mine == step_key(backend.instance_id(), "k") != step_key(backend.instance_id(), "j")
    assert mine != step_key(other_backend.instance_id(), "k")


def test_finished_steps_are_pruned_with_keep_done_and_may_run_again(backend: Store) -> None:
    from agentbox import upkeep
    from agentbox.rules.policy import DAY

    assert backend.acquire("A", T0, TTL) == 1
    for key, status in (("done", "done"), ("failed", "failed"), ("open", None)):
        backend.begin_step("A", 1, key, T0, "at-least-once")
        if status is not None:
            out = b"x" if status == "done" else None
            backend.end_step(key, 1, 1, Outcome(status, 0 if out else 1, out, None), T0)
    policy = Policy(lease_ttl=TTL, keep_done=DAY)
    report = upkeep.prune(backend, T0 + DAY - 1, policy, sleep=lambda _: None)
    assert report.counts.steps == 0
    report = upkeep.prune(backend, T0 + DAY + 1, policy, sleep=lambda _: None)
    assert report.counts.steps == 2 and report.document()["steps"] == 2
    assert [s.key for s in backend.steps()] == ["open"]  # never finished: kept
    assert backend.history("step", "done") == []
    later = T0 + DAY + 2
    assert backend.acquire("B", later + TTL, TTL) == 2
    assert backend.begin_step("B", 2, "done", later + TTL, "at-least-once").action == "run"


def test_a_backup_keeps_the_state_and_the_journal(backend: Store, tmp_path) -> None:
    from agentbox.location import open_store
    from agentbox.upkeep import backup

    gen, ids = _claimed(backend, "A", T0)
    assert backend.finish("A", gen, T0, ids, parse('{"state": {"n": 1}}'))
    assert backend.acquire("B", T0 + TTL + 1, TTL) == gen + 1
    backend.begin_step("B", gen + 1, "k", T0 + TTL + 1, "at-least-once")
    backend.end_step("k", gen + 1, 1, Outcome("done", 0, b"\x00out", None), T0 + TTL + 1)
    dest = tmp_path / "copy.sqlite3"
    backup(backend, str(dest))
    copy = open_store(str(dest), "alice", create=False)
    try:
        assert copy.state_history() == backend.state_history()
        assert copy.steps() == backend.steps()
        assert copy.history("step", "k") == backend.history("step", "k")
    finally:
        copy.close()
