"""Random sequences of ingest, acquire, claim, finish, fail, defer, crash, clock, replay,
steps, the breaker's gate and resume.

A small model of rules 1-4 runs beside a real store, on SQLite and on
PostgreSQL (a new inbox per example, in one schema per run); after every
step the store must agree with the model, and the invariants below must hold:

- each (source, source_id) is stored once and its first payload stands; the sources
  agentbox keeps for itself refuse every delivery, changing nothing;
- a finish or fail from a stale generation never succeeds, nor changes a byte;
- lease generations never decrease; attempts never exceed max_attempts;
- every event is in exactly one state and none is lost;
- a done event is never claimed again; the kept counts match a real count;
- each finish that counted writes one version of the agent's state (its patch merged),
  and nothing else does: a refused finish, a failed run, a malformed (oversized) state;
- each finish that counted records the usage its answer reported, once, and what any
  range of time spent (a day, a quarter hour, edges inside quarters) adds up to the
  runs in it, however the clock moved;
- a step starts only under the lease, a done step never runs again, and one that died
  inside runs again as the next attempt (or is parked, at-most-once);
- the breaker's streak grows with each failed or deferred run that counted and ends with
  a finish; it opens after ``breaker_runs`` over two events or more (a probe's failure
  opens it again), a finish closes it, `resume` lifts it, and the gate keeps runs out
  exactly while it is in force.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from agentbox.errors import BadInput
from agentbox.ledger.pause import USAGE_SLOT_S
from agentbox.ledger.runs import Claimed
from agentbox.ledger.store import Store
from agentbox.location import open_store
from agentbox.rules import breaker
from agentbox.rules.answer import Answer, Usage
from agentbox.rules.breaker import Pause, Streak
from agentbox.rules.keys import RESERVED_SOURCES
from agentbox.rules.policy import Policy
from agentbox.rules.records import EVENT_STATES
from agentbox.rules.state import Change
from agentbox.rules.steps import Outcome
from support import postgres
from support.clock import T0
from support.sqlite import dump, real_counts, sqlite_store

MACHINE_TTL = 100  # the machine's lease: short, so its clock steps cross it often
WORKERS = ("A", "B")
KEYS = (("hook", "1"), ("hook", "2"), ("hook", "3"), ("chat", "1"), ("chat", "2"),
        ("chat", "3"), ("chat", "4"), ("timer", "t@1"))
PAYLOADS = ('{"v":1}', '{"v":2}', '{"a":[1,2],"b":null}')
STEP_KEYS = ("s1", "s2", "s3")
STEP_MODES = ("at-least-once", "at-most-once")


@dataclass(frozen=True)
class Row:
    """The model of one inbox row."""

    id: int
    source: str
    source_id: str
    payload: str
    status: str = "pending"
    attempts: int = 0
    claim_gen: int | None = None
    available_at: int = 0


@dataclass
class WorkerModel:
    """A worker process: its holder name, the lease generation it last got, and its claim.

    The claim keeps the generation it was made under: a worker that stalls,
    takes the lease back and then finishes its old claim speaks for that one.
    """

    holder: str
    generation: int | None = None
    claim_generation: int = 0
    claimed: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)


class EngineMachine(RuleBasedStateMachine):
    """The machine on SQLite; :class:`PostgresMachine` swaps the store and how it is read."""

    def __init__(self) -> None:
        super().__init__()
        self.store: Any = self.open_store()
        self.now = T0
        self.policy = Policy()
        self.rows: dict[int, Row] = {}
        self.lease: tuple[str, int, int, bool] | None = None  # holder, generation, until,
        # released
        self.workers = {name: WorkerModel(f"{name}#0") for name in WORKERS}
        self.restarts = 0
        self.highest_generation = 0
        self.ever_done: set[int] = set()
        self.finishes = 0  # finishes that counted: the state's version
        self.state: dict[str, Any] = {}
        self.steps: dict[str, tuple[str, int]] = {}  # key -> (status, attempts)
        self.streak = Streak()
        self.pause: Pause | None = None
        self.spending: list[tuple[int, int, float]] = []  # (at, tokens, cost), oldest first

    def open_store(self) -> Store:
        self.dir = tempfile.mkdtemp(prefix="agentbox-stateful-")
        return sqlite_store(Path(self.dir) / "inbox.sqlite3", durable=False)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def dump(self) -> object:
        """Every row the inbox holds: equal dumps mean nothing changed."""
        return dump(self.store.engine.conn)

    def real_counts(self) -> dict[str, int]:
        return real_counts(self.store.engine.conn, "events", "status", EVENT_STATES)

    def stored_rows(self) -> list[tuple[Any, ...]]:
        return self.store.engine.conn.execute(
            """SELECT id, source, source_id, payload, status, attempts, claim_gen,
                      available_at FROM events ORDER BY id""").fetchall()

    def keys_stored_twice(self) -> int:
        return int(self.store.engine.conn.execute(
            """SELECT COUNT(*) FROM (SELECT 1 FROM events GROUP BY source, source_id
               HAVING COUNT(*) > 1)""").fetchone()[0])

    # -- the model's reading of the rules --------------------------------------

    def holds(self, holder: str, generation: int | None) -> bool:
        return (self.lease is not None and self.lease[:2] == (holder, generation)
                and self.lease[2] >= self.now and not self.lease[3])

    def fenced(self, w: WorkerModel, ids: list[int]) -> bool:
        return self.holds(w.holder, w.claim_generation) and all(
            self.rows[i].status == "running" and self.rows[i].claim_gen == w.claim_generation
            for i in ids)

    def stale(self, w: WorkerModel) -> bool:
        return w.claim_generation < self.highest_generation

    def finish_expecting(self, w: WorkerModel, ids: list[int]) -> bool:
        """Finish ``ids`` under the worker's claim; a refusal must change nothing."""
        expected = self.fenced(w, ids)
        before = None if expected else self.dump()
        patch = {w.holder[0]: self.finishes + 1, "drop": None}
        usage = Usage(tokens=self.finishes + 1, cost=(self.finishes + 1) / 4)  # sums exact
        got = self.store.finish(w.holder, w.claim_generation, self.now, ids,
                                Answer(state=Change(patch=patch), usage=usage), self.policy)
        assert got == expected
        assert not (got and self.stale(w)), "a stale generation finished"
        if not got:
            assert self.dump() == before
        else:
            self.finishes += 1
            self.state = {**self.state, w.holder[0]: self.finishes}
            self.spending.append((self.now, usage.tokens or 0, usage.cost or 0.0))
            self.streak = Streak()  # the streak ends; an open breaker (its probe) closes
            if self.pause is not None and self.pause.kind == breaker.BREAKER:
                self.pause = None
        return got

    def failed_run(self, ids: list[int]) -> None:
        """A failed or deferred run that counted: the breaker's streak grows."""
        self.streak = breaker.after_failed_run(self.streak, ids)
        if (self.pause is not None and self.pause.kind == breaker.BREAKER) or (
                self.pause is None and breaker.trips(self.streak, self.policy)):
            self.pause = breaker.opened(self.now, self.policy)

    # -- rules -------------------------------------------------------------------

    @initialize(max_attempts=st.integers(1, 3), max_batch=st.integers(1, 4),
                backoff=st.sampled_from([0, 7]), breaker_runs=st.integers(1, 3),
                backlog=st.lists(st.sampled_from(KEYS), min_size=1, max_size=5, unique=True))
    def start(self, max_attempts: int, max_batch: int, backoff: int, breaker_runs: int,
              backlog: list[tuple[str, str]]) -> None:
        """A policy, and a few events already waiting so runs have work from the start."""
        self.policy = Policy(lease_ttl=MACHINE_TTL, max_attempts=max_attempts,
                             max_batch=max_batch, retry_backoff=backoff, backoff_cap=20,
                             max_state=200, keep_state_versions=3,
                             breaker_runs=breaker_runs, breaker_cooldown=MACHINE_TTL)
        for key in backlog:
            self.ingest(key, PAYLOADS[0])

    @rule(key=st.sampled_from(KEYS), payload=st.sampled_from(PAYLOADS))
    def ingest(self, key: tuple[str, str], payload: str) -> None:
        if key[0] in RESERVED_SOURCES:  # agentbox's own sources take no delivery
            before = self.dump()
            with pytest.raises(BadInput, match="kept for agentbox's own events"):
                self.store.ingest(*key, payload, self.now)
            assert self.dump() == before
            return
        result = self.store.ingest(*key, payload, self.now)
        known = next((r for r in self.rows.values() if (r.source, r.source_id) == key), None)
        if known is None:
            assert result.outcome == "stored"
            assert result.id not in self.rows
            self.rows[result.id] = Row(result.id, *key, payload)
        else:
            assert result.id == known.id
            assert result.outcome == ("duplicate" if payload == known.payload else "conflict")

    @rule(name=st.sampled_from(WORKERS))
    def acquire(self, name: str) -> None:
        w = self.workers[name]
        if self.lease is None:
            expected: int | None = 1
        elif self.lease[3] or self.lease[2] < self.now:  # released, or expired
            expected = self.lease[1] + 1
        elif self.lease[0] == w.holder:
            expected = self.lease[1]
        else:
            expected = None
        got = self.store.acquire(w.holder, self.now, MACHINE_TTL)
        assert got == expected
        if got is not None:
            w.generation = got
            self.lease = (w.holder, got, self.now + MACHINE_TTL, False)

    @rule(name=st.sampled_from(WORKERS))
    def release(self, name: str) -> None:
        w = self.workers[name]
        expected = self.holds(w.holder, w.generation)
        before = None if expected else self.dump()
        assert self.store.release(w.holder, w.generation or 0, self.now) == expected
        if expected:
            self.lease = (w.holder, w.generation or 0, self.now, True)
        else:
            assert self.dump() == before

    @rule(name=st.sampled_from(WORKERS), watching=st.booleans())
    def claim(self, name: str, watching: bool = False) -> None:
        """A claim; ``watching``: made as a watcher's wake-up (``take``), which claims
        only where its pause lets it (no timer here is ever due)."""
        w = self.workers[name]
        day = (self.now, self.now + 86_400)
        paused = breaker.in_force(self.pause, self.now) if watching else None

        def claimed() -> Claimed | None:
            if not watching:
                return self.store.claim(w.holder, w.generation or 0, self.now, self.policy)
            taken = self.store.take(w.holder, w.generation or 0, self.now, day, self.policy)
            assert (taken.fired, taken.paused) == (0, paused)
            return taken.claimed

        if paused is not None or not self.holds(w.holder, w.generation):
            before = self.dump()
            assert claimed() is None
            assert self.dump() == before
            return
        gen = w.generation
        assert gen is not None
        p = self.policy
        for row in list(self.rows.values()):
            if row.status == "running" and (row.claim_gen or 0) < gen:  # abandoned
                self.rows[row.id] = replace(row, status="pending",
                                            available_at=self.now + p.backoff(row.attempts))
        for row in list(self.rows.values()):
            if row.status == "pending" and row.attempts >= p.max_attempts:  # exhausted
                self.rows[row.id] = replace(row, status="dead")
        ready = sorted(r.id for r in self.rows.values()
                       if r.status == "pending" and r.available_at <= self.now)
        retries = [i for i in ready if self.rows[i].attempts > 0]
        expected = retries[:1] if retries else ready[:p.max_batch]
        got = claimed()
        assert got is not None
        assert [e.id for e in got] == expected
        assert got.keys == self.store.event_keys(expected) and got.state == self.store.state()
        assert not set(expected) & self.ever_done, "a done event was claimed again"
        for i in expected:
            row = self.rows[i]
            self.rows[i] = replace(row, status="running", attempts=row.attempts + 1,
                                   claim_gen=gen)
        w.claimed, w.claim_generation = expected, gen

    @rule(name=st.sampled_from(WORKERS))
    def start_run(self, name: str) -> None:
        """What a run does first: take the lease, then claim."""
        self.acquire(name)
        self.claim(name)

    @rule(name=st.sampled_from(WORKERS))
    def finish(self, name: str) -> None:
        w = self.workers[name]
        if self.finish_expecting(w, w.claimed):
            for i in w.claimed:
                self.rows[i] = replace(self.rows[i], status="done")
                self.ever_done.add(i)
            w.finished, w.claimed = w.claimed, []

    @rule(name=st.sampled_from(WORKERS))
    def finish_again(self, name: str) -> None:
        """A finish repeated (a retried call) for rows already done: always refused."""
        w = self.workers[name]
        if w.finished:
            assert not self.finish_expecting(w, w.finished)

    @rule(name=st.sampled_from(WORKERS))
    def fail(self, name: str) -> None:
        w = self.workers[name]
        expected = self.fenced(w, w.claimed)
        before = None if expected else self.dump()
        got = self.store.fail(w.holder, w.claim_generation, self.now, w.claimed, "boom",
                              self.policy)
        assert got == expected
        assert not (got and self.stale(w)), "a stale generation failed its rows"
        if not got:
            assert self.dump() == before
            return
        for i in w.claimed:
            row = self.rows[i]
            last = row.attempts >= self.policy.max_attempts
            self.rows[i] = replace(row, status="dead" if last else "pending",
                                   available_at=self.now + self.policy.backoff(row.attempts))
        self.failed_run(w.claimed)
        w.claimed = []

    @rule(name=st.sampled_from(WORKERS))
    def failing_run(self, name: str) -> None:
        """A whole run whose handler errs: what trips a breaker, run after run."""
        self.start_run(name)
        self.fail(name)

    @rule(name=st.sampled_from(WORKERS))
    def defer(self, name: str) -> None:
        """The handler exited 75: attempts given back, a wait, never dead; it counts
        towards the breaker."""
        w = self.workers[name]
        expected = self.fenced(w, w.claimed)
        before = None if expected else self.dump()
        got = self.store.defer(w.holder, w.claim_generation, self.now, w.claimed, "exit 75",
                               self.policy)
        assert got == expected
        if not got:
            assert self.dump() == before
            return
        for i in w.claimed:
            row = self.rows[i]
            self.rows[i] = replace(row, status="pending", attempts=max(row.attempts - 1, 0),
                                   available_at=self.now + breaker.tempfail_wait(self.policy))
        self.failed_run(w.claimed)
        w.claimed = []

    @rule()
    def gate(self) -> None:
        """What a run asks before it claims: the pause in force, or None (no budget is
        set here, so the gate only reads)."""
        before = self.dump()
        assert self.store.gate(self.now, (self.now, self.now + 86_400), self.policy) == (
            breaker.in_force(self.pause, self.now))
        assert self.dump() == before

    @rule()
    def ready(self) -> None:
        """What a watching run asks before it claims, in one read: no timer here is due,
        so it fires nothing, and its pause is the gate's."""
        before = self.dump()
        assert self.store.ready(self.now, (self.now, self.now + 86_400), self.policy) == (
            0, breaker.in_force(self.pause, self.now))
        assert self.dump() == before

    @rule()
    def resume(self) -> None:
        assert self.store.resume(self.now) == self.pause
        self.pause, self.streak = None, Streak()

    @rule(name=st.sampled_from(WORKERS))
    def finish_oversized(self, name: str) -> None:
        """An answer whose state is over max_state: refused whole, fenced or not."""
        w = self.workers[name]
        before = self.dump()
        answer = Answer(state=Change(replace={"x": "y" * self.policy.max_state}))
        if self.fenced(w, w.claimed):
            with pytest.raises(BadInput, match="max_state"):
                self.store.finish(w.holder, w.claim_generation, self.now, w.claimed, answer,
                                  self.policy)
        else:
            assert not self.store.finish(w.holder, w.claim_generation, self.now, w.claimed,
                                         answer, self.policy)
        assert self.dump() == before

    @rule(name=st.sampled_from(WORKERS), key=st.sampled_from(STEP_KEYS),
          mode=st.sampled_from(STEP_MODES), end=st.sampled_from(["done", "failed", "crash"]))
    def step(self, name: str, key: str, mode: str, end: str) -> None:
        """One try of a step by this worker: fenced, memo, parked, or run and ended
        (``crash``: the process died inside the step, nothing recorded its end)."""
        w = self.workers[name]
        generation = w.generation or 0
        begun = self.store.begin_step(w.holder, generation, key, self.now, mode)
        status, attempts = self.steps.get(key, (None, 0))
        if not self.holds(w.holder, generation):
            assert begun.action == "fenced"
            return
        if status == "done":
            assert (begun.action, begun.output) == ("memo", key.encode())
            return
        if status == "uncertain" or (status == "started" and mode == "at-most-once"):
            assert begun.action == "uncertain"
            self.steps[key] = ("uncertain", attempts)
            return
        assert (begun.action, begun.attempt) == ("run", attempts + 1)
        self.steps[key] = ("started", attempts + 1)
        if end != "crash":
            outcome = (Outcome("done", 0, key.encode(), None) if end == "done"
                       else Outcome("failed", 2, None, "exit 2"))
            assert self.store.end_step(key, generation, attempts + 1, outcome, self.now)
            self.steps[key] = (end, attempts + 1)

    @rule(name=st.sampled_from(WORKERS))
    def crash(self, name: str) -> None:
        """The process just stops; its replacement has a new holder name."""
        self.restarts += 1
        self.workers[name] = WorkerModel(f"{name}#{self.restarts}")

    @rule(seconds=st.sampled_from([1, 5, MACHINE_TTL // 2, MACHINE_TTL, MACHINE_TTL + 1,
                                   3 * MACHINE_TTL]))
    def advance_clock(self, seconds: int) -> None:
        self.now += seconds

    @rule(seconds=st.sampled_from([1, MACHINE_TTL, 3 * MACHINE_TTL]))
    def step_clock_back(self, seconds: int) -> None:
        """An NTP step back, or a pinned clock: no rule may depend on time only rising."""
        self.now -= seconds

    @rule(ids=st.one_of(st.none(), st.lists(st.integers(1, len(KEYS) + 1), max_size=3)))
    def replay(self, ids: list[int] | None) -> None:
        dead = sorted(i for i, r in self.rows.items() if r.status == "dead"
                      and (ids is None or i in ids))
        assert self.store.replay(ids, self.now) == dead
        for i in dead:
            self.rows[i] = replace(self.rows[i], status="pending", attempts=0,
                                   claim_gen=None, available_at=0)

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        assert [Row(*r) for r in self.stored_rows()] == [self.rows[i] for i in sorted(self.rows)]

    @invariant()
    def each_key_stored_once(self) -> None:
        assert self.keys_stored_twice() == 0

    @invariant()
    def generations_never_decrease(self) -> None:
        lease = self.store.lease()
        assert tuple(lease) == self.lease if lease else self.lease is None
        generation = lease.generation if lease else 0
        assert generation >= self.highest_generation
        self.highest_generation = generation

    @invariant()
    def attempts_within_bounds(self) -> None:
        assert all(0 <= r.attempts <= self.policy.max_attempts for r in self.rows.values())

    @invariant()
    def every_event_in_exactly_one_state_and_counted(self) -> None:
        kept = self.store.status().events
        assert kept == self.real_counts()
        assert sum(kept.values()) == len(self.rows)
        model = {s: sum(r.status == s for r in self.rows.values()) for s in EVENT_STATES}
        assert kept == model

    @invariant()
    def done_stays_done(self) -> None:
        assert all(self.rows[i].status == "done" for i in self.ever_done)

    @invariant()
    def state_version_counts_the_finishes_that_counted(self) -> None:
        state = self.store.state()
        assert (state.version, state.value()) == (self.finishes, self.state)

    @invariant()
    def the_breaker_matches_the_model(self) -> None:
        governor = self.store.governor()
        assert (governor.pause, governor.streak, governor.waived_until) == (
            self.pause, self.streak, None)

    @invariant()
    def spending_matches_the_model(self) -> None:
        """A finish that counted records its usage once, and any range adds up to the
        runs in it, through the quarter-hour totals, whichever way the clock went."""
        assert [(u.at, u.tokens, u.cost) for u in self.store.usage()] == [
            (at, tokens, cost) for at, tokens, cost in reversed(self.spending)]
        quarter = self.now - self.now % USAGE_SLOT_S
        for start, end in ((self.now - 86_400, self.now + 1), (T0 + 37, self.now + 451),
                           (quarter, quarter + USAGE_SLOT_S), (quarter - USAGE_SLOT_S, quarter)):
            inside = [(t, c) for at, t, c in self.spending if start <= at < end]
            assert self.store.spent((start, end)) == (sum(t for t, _ in inside),
                                                      sum(c for _, c in inside))

    @invariant()
    def the_journal_matches_the_model(self) -> None:
        assert {s.key: (s.status, s.attempts) for s in self.store.steps()} == self.steps


class PostgresMachine(EngineMachine):
    """The same machine on PostgreSQL: a new user's inbox per example, all in one schema,
    so every example also checks that inboxes sharing tables stay apart."""

    url: ClassVar[str] = ""
    users: ClassVar[Iterator[int]] = itertools.count()

    def open_store(self) -> Store:
        return open_store(self.url, f"machine-{next(self.users)}", durable=False)

    def teardown(self) -> None:
        self.store.close()

    def dump(self) -> object:
        return postgres.dump(self.store)

    def real_counts(self) -> dict[str, int]:
        return postgres.real_counts(self.store, "events", "status", EVENT_STATES)

    def stored_rows(self) -> list[tuple[Any, ...]]:
        return list(self.store.engine.conn.execute(
            """SELECT id, source, source_id, payload, status, attempts, claim_gen,
                      available_at FROM events WHERE inbox_id = %s ORDER BY id""",
            (self.store.inbox_id,)).fetchall())

    def keys_stored_twice(self) -> int:
        return int(self.store.engine.conn.execute(
            """SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE inbox_id = %s
               GROUP BY source, source_id HAVING COUNT(*) > 1) twice""",
            (self.store.inbox_id,)).fetchone()[0])


EngineMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
# Every step is a few network round trips on PostgreSQL: fewer examples, as long a run.
PostgresMachine.TestCase.settings = settings(
    EngineMachine.TestCase.settings, max_examples=40)
test_engine_rules = EngineMachine.TestCase
test_engine_rules_postgres = PostgresMachine.TestCase


@pytest.fixture(scope="module")
def postgres_schema() -> Iterator[str]:
    with postgres.fresh_schema() as url:
        yield url


@pytest.fixture(autouse=True)
def _postgres_place(request: pytest.FixtureRequest) -> None:
    """Give the PostgreSQL machine its schema (or skip it when there is no server)."""
    if request.cls is test_engine_rules_postgres:
        PostgresMachine.url = request.getfixturevalue("postgres_schema")
