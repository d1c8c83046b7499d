"""Pauses: the breaker's streak, a spent budget, and what each run said it spent.

One row of ``pauses`` per inbox (made by the first failed run, pause or
resume) holds the pause in force, the streak of failed runs and the end of a
local day whose budget ``resume`` waived; ``run_usage`` one row per run whose
answer reported usage, and ``usage_slots`` their totals per quarter of an hour
(:data:`USAGE_SLOT_S`), so that the budget check before a claim adds up at most
the 96 totals of a day, not every run of it. What a streak, a pause or a budget
means is decided in :mod:`agentbox.rules.breaker`; a run's fail and finish
update the streak in their own fenced transaction (:func:`failed_in`,
:func:`succeeded_in`), and a run asks :meth:`Pauses.gate` before it claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from agentbox.ledger import history
from agentbox.ledger.core import Core

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader, Row, Tx
    from agentbox.rules.answer import Usage
    from agentbox.rules.breaker import Pause, Streak
    from agentbox.rules.policy import Policy

# Every zone's offset from UTC is a whole number of quarter hours (+05:45, +12:45), so
# a local day starts and ends on a slot's edge; a range that does not (an offset of
# the past, a range asked for by hand) has its part-slots summed from the runs' rows.
USAGE_SLOT_S = 900

GOVERNOR = "kind, reason, since, until, streak, streak_event, streak_distinct, waived_until"
_ROW = f"SELECT {GOVERNOR} FROM pauses WHERE inbox_id = :box"
_UPSERT = """INSERT INTO pauses (inbox_id, kind, reason, since, until, streak, streak_event,
                                 streak_distinct, waived_until)
             VALUES (:box, :kind, :reason, :since, :until, :streak, :streak_event,
                     :streak_distinct, :waived_until)
             ON CONFLICT (inbox_id) DO UPDATE SET kind = excluded.kind,
                 reason = excluded.reason, since = excluded.since, until = excluded.until,
                 streak = excluded.streak, streak_event = excluded.streak_event,
                 streak_distinct = excluded.streak_distinct,
                 waived_until = excluded.waived_until"""


class Governor(NamedTuple):
    """An inbox's row of ``pauses`` as the rules see it."""

    pause: Pause | None
    streak: Streak
    waived_until: int | None


class UsageRecord(NamedTuple):
    at: int
    generation: int | None
    events: tuple[int, ...]
    tokens: int | None
    cost: float | None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _governor(reader: Reader | Tx) -> Governor:
    return governor_of(reader.one(_ROW))


def governor_of(row: Row | None) -> Governor:
    """The governor from a row of :data:`GOVERNOR` columns (None, or a row of NULLs:
    the inbox never paused or failed)."""
    from agentbox.rules.breaker import Pause, Streak

    if row is None or row[4] is None:  # streak is NOT NULL in every row kept
        return Governor(None, Streak(), None)
    kind, reason, since, until, streak, event, distinct, waived = row
    pause = None if kind is None else Pause(str(kind), str(reason), int(since), _int(until))
    return Governor(pause, Streak(int(streak), _int(event), bool(distinct)), _int(waived))


def _store(tx: Tx, state: Governor) -> None:
    pause, streak = state.pause, state.streak
    tx.run(_UPSERT, kind=None if pause is None else pause.kind,
           reason=None if pause is None else pause.reason,
           since=None if pause is None else pause.since,
           until=None if pause is None else pause.until, streak=streak.runs,
           streak_event=streak.first_event, streak_distinct=streak.distinct,
           waived_until=state.waived_until)


def _paused(tx: Tx, now: int, pause: Pause, generation: int | None) -> None:
    history.record(tx, now, "inbox", "pause", "paused", generation, pause.reason)


def failed_in(tx: Tx, now: int, generation: int, ids: Sequence[int],
              policy: Policy) -> None:
    """A failed run (its handler erred or exited 75), inside its fail transaction: the
    streak grows, and the breaker opens when it trips or when this run was its probe."""
    from agentbox.rules import breaker

    state = _governor(tx)
    streak = breaker.after_failed_run(state.streak, ids)
    pause = state.pause
    if (pause is not None and pause.kind == breaker.BREAKER) or (
            pause is None and breaker.trips(streak, policy)):
        pause = breaker.opened(now, policy)
        _paused(tx, now, pause, generation)
    _store(tx, Governor(pause, streak, state.waived_until))


def succeeded_in(tx: Tx, now: int, generation: int) -> None:
    """A finished run, inside its finish transaction: the streak is over and an open
    breaker (this run was its probe) closes. One read of a row an inbox that never
    failed does not have; a write only when there is something to end."""
    from agentbox.rules import breaker
    from agentbox.rules.breaker import Streak

    state = _governor(tx)
    probe = state.pause is not None and state.pause.kind == breaker.BREAKER
    if not probe and state.streak.runs == 0:
        return
    _store(tx, Governor(None if probe else state.pause, Streak(), state.waived_until))
    if probe:
        history.record(tx, now, "inbox", "pause", "resumed", generation,
                       "a probe run succeeded; the breaker closed")


def usage_in(tx: Tx, now: int, generation: int, ids: Sequence[int], usage: Usage | None) -> None:
    """Record what a finished run's answer said it spent, with the run, and add it to
    the total of its slot."""
    if usage is None:
        return
    tx.run("""INSERT INTO run_usage (inbox_id, at, generation, events, tokens, cost)
              VALUES (:box, :at, :generation, :events, :tokens, :cost)""",
           at=now, generation=generation, events=",".join(map(str, sorted(ids))),
           tokens=usage.tokens, cost=usage.cost)
    tx.run("""INSERT INTO usage_slots (inbox_id, slot, tokens, cost)
              VALUES (:box, :slot, :tokens, :cost)
              ON CONFLICT (inbox_id, slot) DO UPDATE SET
                  tokens = usage_slots.tokens + excluded.tokens,
                  cost = usage_slots.cost + excluded.cost""",
           slot=now - now % USAGE_SLOT_S, tokens=usage.tokens or 0,
           cost=float(usage.cost or 0))


def _spent(reader: Reader | Tx, start: int, end: int) -> tuple[float, float]:
    """What the runs of [start, end) spent: the totals of the whole slots in it, and the
    rows of the runs in the part-slots at either end (none for a local day)."""
    whole_from = -(-start // USAGE_SLOT_S) * USAGE_SLOT_S
    whole_to = end - end % USAGE_SLOT_S
    if whole_from >= whole_to:  # not one whole slot: every run's row
        whole_from = whole_to = end
    row = reader.one("""SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost), 0) FROM (
                            SELECT tokens, cost FROM usage_slots WHERE inbox_id = :box
                                AND slot >= :whole_from AND slot < :whole_to
                            UNION ALL SELECT tokens, cost FROM run_usage WHERE inbox_id = :box
                                AND at >= :start AND at < :whole_from
                            UNION ALL SELECT tokens, cost FROM run_usage WHERE inbox_id = :box
                                AND at >= :whole_to AND at < :end) AS spent""",
                     start=start, end=end, whole_from=whole_from, whole_to=whole_to)
    assert row is not None
    return float(row[0]), float(row[1])


class Pauses(Core):
    """The pause an inbox is under, the budget check before a claim, and `resume`."""

    def paused(self) -> Pause | None:
        """The pause recorded (a breaker's whose probe is due included); reads only."""
        return _governor(self._read()).pause

    def governor(self) -> Governor:
        return _governor(self._read())

    def gate(self, now: int, day: tuple[int, int], policy: Policy) -> Pause | None:
        """The pause that keeps a run from claiming now, or None: it may claim.

        ``day`` is the local day holding ``now`` (its first second and the first
        of the next). A budget pause ends with its day; a breaker's lets one probe
        run through after its cooldown. With a budget set, the day's usage is
        summed, and reaching the budget pauses the inbox and queues one urgent
        message on the default channel, in one transaction with the pause. Reads
        only, unless something changes.
        """
        reader = self._read()
        return self._gate_of(_governor(reader), reader, now, day, policy)

    def _gate_of(self, state: Governor, reader: Reader, now: int, day: tuple[int, int],
                 policy: Policy) -> Pause | None:
        """:meth:`gate`, the inbox's governor already read."""
        from agentbox.rules import breaker

        if breaker.in_force(state.pause, now) is not None:
            return state.pause
        expired = state.pause is not None and state.pause.kind == breaker.BUDGET
        waived = state.waived_until is not None and now < state.waived_until
        over = None  # (which budget was reached, what was spent)
        if breaker.budgeted(policy) and not waived and not (
                state.pause is not None and state.pause.kind == breaker.BREAKER):
            tokens, cost = _spent(reader, *day)
            reason = breaker.over_budget(tokens, cost, policy)
            if reason is not None:
                over = reason, breaker.spent(tokens, cost, policy)
        if over is None and not expired:
            return None
        return self._budget_pause(now, day, over)

    def _budget_pause(self, now: int, day: tuple[int, int],
                      over: tuple[str, str] | None) -> Pause | None:
        """Under the lock: an ended budget pause lifted, a new one set (with its notice)
        when ``over`` says which budget was reached and what was spent."""
        from agentbox.ledger.outbox import queue_in
        from agentbox.rules import breaker
        from agentbox.rules.answer import Message
        from agentbox.spelling import pause_notice

        with self._locked() as (tx, _):
            state = _governor(tx)
            pause = state.pause
            if breaker.in_force(pause, now) is not None:
                return pause  # another run paused it since gate() looked
            if pause is not None and pause.kind == breaker.BUDGET:
                history.record(tx, now, "inbox", "pause", "resumed", None,
                               "the budget's local day ended")
                pause = None
            if over is not None and pause is None:
                reason, spending = over
                pause = breaker.Pause(breaker.BUDGET, reason, now, day[1])
                history.record(tx, now, "inbox", "pause", "paused", None,
                               f"{reason}: {spending} today")
                notice = Message(pause_notice(reason, spending, day[1]), urgent=True)
                queue_in(self.engine, tx, now, None, [notice])
            _store(tx, Governor(pause, state.streak, state.waived_until))
            return breaker.in_force(pause, now)

    def resume(self, now: int) -> Pause | None:
        """Lift the pause in force (None: there was none). A budget pause stays lifted
        for the rest of its local day: the budget is not checked again until it ends.
        The breaker's streak starts again from nothing."""
        from agentbox.rules import breaker
        from agentbox.rules.breaker import Streak

        with self._locked() as (tx, _):
            state = _governor(tx)
            pause = state.pause
            waived = state.waived_until
            if pause is not None and pause.kind == breaker.BUDGET:
                waived = pause.until
            if pause is not None:
                history.record(tx, now, "inbox", "pause", "resumed", None,
                               f"resumed by hand ({pause.reason})")
            _store(tx, Governor(None, Streak(), waived))
            return pause

    def usage(self, limit: int | None = None) -> list[UsageRecord]:
        """What runs reported spending, newest first."""
        bound = "" if limit is None else f" LIMIT {int(limit)}"
        rows = self._read().rows(
            f"""SELECT at, generation, events, tokens, cost FROM run_usage
                WHERE inbox_id = :box ORDER BY id DESC{bound}""")
        return [UsageRecord(int(at), _int(gen),
                            tuple(int(i) for i in str(events).split(",") if i),
                            _int(tokens), None if cost is None else float(cost))
                for at, gen, events, tokens, cost in rows]

    def spent(self, day: tuple[int, int]) -> tuple[float, float]:
        """(tokens, cost) reported by the runs of one local day."""
        return _spent(self._read(), *day)
