"""Store contract: the breaker's streak and pause, a day's budget, what runs spent, and
`resume` — the ledger half of governed runs, pinned in process on every backend."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from agentbox.ledger.pause import USAGE_SLOT_S
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Usage
from agentbox.rules.breaker import BREAKER, BUDGET, HANDLER_FAILING, Pause, Streak
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.store import schema_before

# Each failed event dies at once, so each run fails a new one (an event that failed
# before is handed to its next run alone).
BREAKS = Policy(lease_ttl=TTL, max_attempts=1, breaker_runs=3, breaker_cooldown=600)
DAY = (T0, T0 + 86_400)  # the local day the tests' runs fall in
TOKENS = Policy(lease_ttl=TTL, budget_tokens_per_day=1000)


def _batch(store: Store, now: int, keys: Sequence[str], policy: Policy) -> tuple[int, list[int]]:
    for key in keys:
        store.ingest("chat", key, "{}", now)
    generation = store.acquire("W", now, TTL)
    assert generation is not None
    claimed = store.claim("W", generation, now, policy)
    assert claimed is not None
    return generation, [e.id for e in claimed]


def _failed(store: Store, now: int, keys: Sequence[str], policy: Policy = BREAKS,
            tempfail: bool = False) -> None:
    generation, ids = _batch(store, now, keys, policy)
    end = store.defer if tempfail else store.fail
    assert end("W", generation, now, ids, "boom", policy)
    assert store.release("W", generation, now)


def _finished(store: Store, now: int, usage: Usage | None = None,
              policy: Policy = BREAKS) -> list[int]:
    generation, ids = _batch(store, now, [f"ok{now}"], policy)
    assert store.finish("W", generation, now, ids, Answer(usage=usage), policy)
    assert store.release("W", generation, now)
    return ids


def _pauses(store: Store) -> list[tuple[int, str, str | None]]:
    return [(e.at, e.action, e.detail) for e in store.history("inbox", "pause")]


def test_failed_runs_over_two_events_open_the_breaker_at_breaker_runs(backend: Store) -> None:
    _failed(backend, T0, ["a"])
    _failed(backend, T0 + 1, ["b"])
    assert backend.paused() is None and backend.governor().streak.runs == 2
    assert backend.gate(T0 + 2, DAY, BREAKS) is None
    _failed(backend, T0 + 2, ["c"], tempfail=True)  # exit 75 counts towards the breaker
    expected = Pause(BREAKER, HANDLER_FAILING, T0 + 2, T0 + 602)
    assert backend.paused() == expected
    assert backend.gate(T0 + 601, DAY, BREAKS) == expected
    assert _pauses(backend) == [(T0 + 2, "paused", HANDLER_FAILING)]


def test_one_poison_event_failing_alone_never_opens_the_breaker(backend: Store) -> None:
    policy = BREAKS._replace(max_attempts=100)
    generation, [poison] = _batch(backend, T0, ["poison"], policy)
    backend.ingest("chat", "next", "{}", T0)  # waiting behind it, never in its runs
    for n in range(6):
        assert backend.fail("W", generation, T0 + n, [poison], "boom", policy)
        claimed = backend.claim("W", generation, T0 + n, policy)
        assert claimed is not None and [e.id for e in claimed] == [poison]
    assert backend.paused() is None
    streak = backend.governor().streak
    assert (streak.runs, streak.first_event, streak.distinct) == (6, poison, False)


def test_a_finished_run_ends_the_streak(backend: Store) -> None:
    _failed(backend, T0, ["a"])
    _failed(backend, T0 + 1, ["b"])
    _finished(backend, T0 + 2)
    assert backend.governor().streak.runs == 0
    _failed(backend, T0 + 3, ["c"])
    _failed(backend, T0 + 4, ["d"])
    assert backend.paused() is None and _pauses(backend) == []


def test_the_probe_after_the_cooldown_closes_or_reopens_the_breaker(backend: Store) -> None:
    for n, key in enumerate("abc"):
        _failed(backend, T0 + n, [key])
    assert backend.gate(T0 + 602, DAY, BREAKS) is None  # the probe may run
    _failed(backend, T0 + 602, ["d"])  # it failed: open again, from now
    assert backend.paused() == Pause(BREAKER, HANDLER_FAILING, T0 + 602, T0 + 1202)
    assert backend.gate(T0 + 1202, DAY, BREAKS) is None
    _finished(backend, T0 + 1202)
    assert backend.paused() is None and backend.governor().streak.runs == 0
    assert [a for _, a, _ in _pauses(backend)] == ["paused", "paused", "resumed"]
    assert _pauses(backend)[-1] == (T0 + 1202, "resumed",
                                    "a probe run succeeded; the breaker closed")


def test_resume_lifts_the_breaker_and_starts_the_streak_again(backend: Store) -> None:
    assert backend.resume(T0) is None and _pauses(backend) == []
    for n, key in enumerate("abc"):
        _failed(backend, T0 + n, [key])
    lifted = backend.resume(T0 + 10)
    assert lifted is not None and lifted.kind == BREAKER
    assert backend.paused() is None and backend.governor().streak.runs == 0
    assert backend.governor().waived_until is None  # a breaker waives no budget
    _failed(backend, T0 + 11, ["d"])
    _failed(backend, T0 + 12, ["e"])
    assert backend.paused() is None
    assert _pauses(backend)[-1] == (T0 + 10, "resumed", f"resumed by hand ({HANDLER_FAILING})")


def test_usage_is_recorded_with_each_run_and_summed_per_day(backend: Store) -> None:
    first = _finished(backend, T0 + 5, Usage(tokens=300, cost=0.25))
    _finished(backend, T0 + 6)  # no usage said: nothing recorded
    second = _finished(backend, T0 + 7, Usage(tokens=200))
    _finished(backend, DAY[1], Usage(tokens=999, cost=9.0))  # the next day
    records = backend.usage()
    assert [(r.at, r.events, r.tokens, r.cost) for r in records] == [
        (DAY[1], records[0].events, 999, 9.0), (T0 + 7, tuple(second), 200, None),
        (T0 + 5, tuple(first), 300, 0.25)]
    assert records[1].generation is not None
    assert [r.at for r in backend.usage(limit=2)] == [DAY[1], T0 + 7]
    assert backend.spent(DAY) == (500, 0.25)
    assert backend.spent((T0 + 6, T0 + 7)) == (0, 0)


def test_what_a_range_spent_is_its_runs_whatever_its_edges(backend: Store) -> None:
    """The budget adds up the totals of the whole quarter hours in a range and the runs
    of the part-quarters at either end: any range, a day or a minute, aligned or not,
    gives the sum of the runs in it."""
    base = T0 - T0 % USAGE_SLOT_S + 10 * USAGE_SLOT_S
    times = [base - USAGE_SLOT_S - 1, base - 1, base, base + 1, base + USAGE_SLOT_S // 2,
             base + USAGE_SLOT_S - 1, base + USAGE_SLOT_S, base + 3 * USAGE_SLOT_S + 7,
             base + 5 * USAGE_SLOT_S]
    for n, at in enumerate(times):  # costs in quarters: their sums are exact
        _finished(backend, at, Usage(tokens=None if n % 4 == 1 else n + 1,
                                     cost=None if n % 4 == 3 else n / 4))
    runs = [(r.at, r.tokens or 0, r.cost or 0.0) for r in backend.usage()]
    edges = sorted({*times, *(t + 1 for t in times), base - 2 * USAGE_SLOT_S,
                    base + 6 * USAGE_SLOT_S})
    for start in edges:
        for end in (e for e in edges if e > start):
            inside = [(tokens, cost) for at, tokens, cost in runs if start <= at < end]
            assert backend.spent((start, end)) == (sum(t for t, _ in inside),
                                                   sum(c for _, c in inside)), (start, end)


def test_reaching_the_budget_pauses_once_with_one_urgent_notice(backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=999), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is None
    _finished(backend, T0 + 2, Usage(tokens=1), TOKENS)
    paused = backend.gate(T0 + 3, DAY, TOKENS)
    assert paused == Pause(BUDGET, "token budget", T0 + 3, DAY[1])
    assert backend.gate(T0 + 4, DAY, TOKENS) == paused  # still paused, no second notice
    [notice] = backend.outbox()
    assert notice.urgent and "token budget reached: 1000 of 1000 tokens today" in notice.body
    assert _pauses(backend) == [(T0 + 3, "paused", "token budget: 1000 of 1000 tokens today")]
    # The day ends: the pause lifts by itself, and the new day's usage is nothing yet.
    assert backend.gate(DAY[1], (DAY[1], DAY[1] + 86_400), TOKENS) is None
    assert backend.paused() is None
    assert _pauses(backend)[-1] == (DAY[1], "resumed", "the budget's local day ended")


def test_a_cost_budget_pauses_and_an_unbudgeted_inbox_never_does(backend: Store) -> None:
    costs = Policy(lease_ttl=TTL, budget_cost_per_day=1.5)
    _finished(backend, T0, Usage(tokens=10**9, cost=1.5), costs)
    assert backend.gate(T0 + 1, DAY, BREAKS) is None  # no budget set: never paused
    assert backend.gate(T0 + 1, DAY, costs) == Pause(BUDGET, "cost budget", T0 + 1, DAY[1])
    assert "cost 1.5 of 1.5" in backend.outbox()[0].body


def test_resume_waives_the_budget_for_the_rest_of_its_day(backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=5000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    lifted = backend.resume(T0 + 2)
    assert lifted is not None and lifted.kind == BUDGET
    assert backend.governor().waived_until == DAY[1]
    assert backend.gate(T0 + 3, DAY, TOKENS) is None  # over budget, but waived today
    assert len(backend.outbox()) == 1
    next_day = (DAY[1], DAY[1] + 86_400)
    _finished(backend, DAY[1] + 1, Usage(tokens=1000), TOKENS)
    assert backend.gate(DAY[1] + 2, next_day, TOKENS) == Pause(BUDGET, "token budget",
                                                                DAY[1] + 2, next_day[1])


def test_an_open_breaker_is_not_replaced_by_a_budget_pause(backend: Store) -> None:
    policy = BREAKS._replace(budget_tokens_per_day=10)
    _finished(backend, T0, Usage(tokens=50), policy)
    for n, key in enumerate("abc"):
        _failed(backend, T0 + 1 + n, [key], policy)
    breaker = backend.paused()
    assert breaker is not None and breaker.kind == BREAKER
    assert backend.gate(T0 + 10, DAY, policy) == breaker
    assert backend.gate(T0 + 700, DAY, policy) is None  # the probe runs; no budget check
    assert backend.outbox() == [] and backend.paused() == breaker


def test_the_budget_s_notice_says_what_was_spent_and_until_when(backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=1000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    [notice] = backend.outbox()
    assert notice.body == ("agentbox paused this inbox (token budget reached: 1000 of 1000 "
                           "tokens today): runs claim nothing until 1970-01-13T13:46:40Z; "
                           "`agentbox resume` lifts it")  # DAY[1], the local day's end


def test_a_run_s_usage_lists_every_event_of_its_batch(backend: Store) -> None:
    generation, ids = _batch(backend, T0, ["a", "b", "c"], BREAKS)
    assert len(ids) == 3
    assert backend.finish("W", generation, T0, ids, Answer(usage=Usage(tokens=7)), BREAKS)
    [record] = backend.usage()
    assert (record.at, record.generation, record.events, record.tokens) == (
        T0, generation, tuple(sorted(ids)), 7)


def test_a_budget_pause_changes_the_pause_alone(backend: Store) -> None:
    """The streak of failed runs and the end of an earlier waiver stay as recorded."""
    _finished(backend, T0, Usage(tokens=5000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    assert backend.resume(T0 + 2) is not None  # waived until the day's end
    next_day = (DAY[1], DAY[1] + 86_400)
    _finished(backend, DAY[1] + 1, Usage(tokens=1000), TOKENS)
    _failed(backend, DAY[1] + 2, ["x"], BREAKS._replace(budget_tokens_per_day=1000))
    before = backend.governor()
    assert (before.streak.runs, before.waived_until) == (1, DAY[1])
    paused = backend.gate(DAY[1] + 3, next_day, TOKENS)
    assert paused == Pause(BUDGET, "token budget", DAY[1] + 3, next_day[1])
    assert backend.governor() == before._replace(pause=paused)


def test_a_waiver_ends_with_its_day(backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=5000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    assert backend.resume(T0 + 2) is not None  # waived until DAY[1]
    next_day = (DAY[1], DAY[1] + 86_400)
    _finished(backend, DAY[1], Usage(tokens=1000), TOKENS)
    assert backend.gate(DAY[1], next_day, TOKENS) == Pause(BUDGET, "token budget", DAY[1],
                                                           next_day[1])


def test_a_day_already_over_budget_pauses_again_as_the_last_pause_ends(
        backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=1000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    next_day = (DAY[1], DAY[1] + 86_400)
    _finished(backend, DAY[1], Usage(tokens=1000), TOKENS)  # a run that claimed before
    assert backend.gate(DAY[1] + 1, next_day, TOKENS) == Pause(
        BUDGET, "token budget", DAY[1] + 1, next_day[1])
    assert [a for _, a, _ in _pauses(backend)] == ["paused", "resumed", "paused"]
    assert len(backend.outbox()) == 2  # one notice per pause


def test_the_streak_says_where_it_began_and_whether_it_covered_other_events(
        backend: Store) -> None:
    _failed(backend, T0, ["a"])
    first = backend.find("chat", "a")
    assert first is not None
    assert backend.governor().streak == Streak(1, first.id, False)
    _failed(backend, T0 + 1, ["b"])
    assert backend.governor().streak == Streak(2, first.id, True)


def test_the_breaker_s_lines_name_the_runs_that_opened_and_closed_it(backend: Store) -> None:
    generations = []
    for n, key in enumerate("abc"):
        generation, ids = _batch(backend, T0 + n, [key], BREAKS)
        assert backend.fail("W", generation, T0 + n, ids, "boom", BREAKS)
        assert backend.release("W", generation, T0 + n)
        generations.append(generation)
    probe, ids = _batch(backend, T0 + 602, ["ok"], BREAKS)
    assert backend.finish("W", probe, T0 + 602, ids, Answer(), BREAKS)
    assert [(e.action, e.generation) for e in backend.history("inbox", "pause")] == [
        ("paused", generations[-1]), ("resumed", probe)]


def test_one_finished_run_ends_a_streak_of_one(backend: Store) -> None:
    _failed(backend, T0, ["a"])
    _finished(backend, T0 + 1)
    assert backend.governor().streak == Streak()


def test_a_run_ending_under_a_budget_pause_leaves_the_pause(backend: Store) -> None:
    """A run that claimed before the budget paused the inbox may fail or finish after:
    its streak moves, the budget's pause stays."""
    both = BREAKS._replace(budget_tokens_per_day=1000)
    _failed(backend, T0, ["a"], both)
    _finished(backend, T0 + 1, Usage(tokens=1000), both)
    _failed(backend, T0 + 2, ["b"], both)
    paused = backend.gate(T0 + 3, DAY, both)
    assert paused is not None and paused.kind == BUDGET
    _failed(backend, T0 + 4, ["c"], both)
    assert backend.paused() == paused and backend.governor().streak.runs == 2
    _finished(backend, T0 + 5, policy=both)
    assert backend.paused() == paused and backend.governor().streak == Streak()


def test_a_waiver_outlives_the_runs_and_resumes_after_it(backend: Store) -> None:
    _finished(backend, T0, Usage(tokens=5000), TOKENS)
    assert backend.gate(T0 + 1, DAY, TOKENS) is not None
    assert backend.resume(T0 + 2) is not None
    _failed(backend, T0 + 3, ["a"], BREAKS._replace(budget_tokens_per_day=1000))
    _finished(backend, T0 + 4, policy=TOKENS)
    assert backend.governor().waived_until == DAY[1]
    assert backend.resume(T0 + 5) is None  # nothing to lift: the waiver stands
    assert backend.governor().waived_until == DAY[1]
    assert backend.gate(T0 + 6, DAY, TOKENS) is None


def test_two_runs_reaching_the_budget_at_once_pause_it_once(
        backend: Store, twin: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The day's usage is summed before the lock is taken: the run that then takes it
    second finds the other's pause in force and keeps it, with its one notice."""
    import agentbox.ledger.pause as pauses

    _finished(backend, T0, Usage(tokens=1000), TOKENS)
    summed = pauses._spent

    def other_run_first(reader: object, start: int, end: int) -> tuple[float, float]:
        monkeypatch.setattr(pauses, "_spent", summed)
        assert twin.gate(T0 + 1, DAY, TOKENS) is not None
        return summed(reader, start, end)  # type: ignore[arg-type]

    monkeypatch.setattr(pauses, "_spent", other_run_first)
    assert backend.gate(T0 + 2, DAY, TOKENS) == Pause(BUDGET, "token budget", T0 + 1, DAY[1])
    assert len(backend.outbox()) == 1
    assert _pauses(backend) == [(T0 + 1, "paused", "token budget: 1000 of 1000 tokens today")]


def test_an_inbox_made_before_the_quarter_hour_totals_gets_them_from_its_runs(
        backend_name: str, monkeypatch: pytest.MonkeyPatch,
        open_inbox: Callable[..., Store]) -> None:
    """Totals came with SQLite's version 15 and PostgreSQL's 7: the migration makes them
    from the runs already recorded, so a day's budget counts those runs too."""
    quarter = T0 - T0 % USAGE_SLOT_S
    with schema_before(backend_name, {"sqlite": 14, "postgres": 6}, monkeypatch):
        store = open_inbox()
        with store._write() as tx:
            for at, tokens, cost in ((T0, 5, 0.5), (T0 + 1, None, 0.25), (T0 + 2, 7, None),
                                     (quarter + USAGE_SLOT_S, 100, 2.0)):
                tx.run("""INSERT INTO run_usage (inbox_id, at, generation, events, tokens,
                                                 cost)
                          VALUES (:box, :at, 1, '1', :tokens, :cost)""",
                       at=at, tokens=tokens, cost=cost)
        store.close()
    store = open_inbox()
    assert store.spent((quarter, quarter + USAGE_SLOT_S)) == (12, 0.75)  # the totals alone
    assert store.spent((quarter, quarter + 2 * USAGE_SLOT_S)) == (112, 2.75)
    assert store.gate(T0 + 3, (quarter, quarter + 86_400), TOKENS._replace(
        budget_tokens_per_day=112)) is not None  # reached: paused
