"""The Store: one user's inbox, every operation on it written once, on any engine.

Every command, the worker, the dispatcher, the pool, the scenario runner and
the tests speak to :class:`Store`. Its operations come from the ledger's
parts (inbox, lease, runs, timers, approvals, links, outbox, prune, traffic, state,
steps), each part one
module, each operation one method there: the transaction it runs, the rules
of :mod:`agentbox.rules` it applies, the history it records. The engine
underneath (:mod:`agentbox.ledger.engine`) only stores, locks and queries,
and turns its driver's errors into agentbox's own.

Time is always an argument (``now``, integer Unix seconds): a store never
reads the clock. Each part imports the rules it applies where it applies
them: `agentbox ingest` runs once per webhook and loads none of the rules of
runs, timers, approvals, the outbox or pruning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from agentbox.ledger.approvals import Approvals
from agentbox.ledger.canonical import Canonicalise
from agentbox.ledger.inbox import Inbox
from agentbox.ledger.lease import Leases
from agentbox.ledger.links import Links
from agentbox.ledger.outbox import Outbox
from agentbox.ledger.pause import GOVERNOR, Pauses, governor_of
from agentbox.ledger.prune import Prune
from agentbox.ledger.runs import NotNow, Runs
from agentbox.ledger.state import State
from agentbox.ledger.status import Status, Vitals
from agentbox.ledger.steps import Steps
from agentbox.ledger.timers import DUE, Timers, next_due
from agentbox.ledger.traffic import Traffic

if TYPE_CHECKING:
    from agentbox.ledger.engine import Row, Waiter
    from agentbox.ledger.runs import Claimed
    from agentbox.rules.breaker import Pause
    from agentbox.rules.health import Check
    from agentbox.rules.policy import Policy


# (oldest pending arrival, last run, last prune, newest arrival, newest transition),
# each the end of an index walk, in one read.
_READINGS = """
SELECT (SELECT created_at FROM events WHERE inbox_id = :box AND status = 'pending'
        ORDER BY id LIMIT 1),
       i.last_run, i.last_prune,
       (SELECT created_at FROM events WHERE inbox_id = :box ORDER BY id DESC LIMIT 1),
       (SELECT at FROM history WHERE inbox_id = :box ORDER BY id DESC LIMIT 1)
FROM (SELECT :box AS id) me LEFT JOIN inboxes i ON i.id = me.id"""
# What a run looks at before it claims: whether a timer is due, and the inbox's
# governor (NULLs where it never paused or failed), in one read.
_READY = f"""
SELECT EXISTS (SELECT 1 FROM timers WHERE inbox_id = :box AND {DUE}), {GOVERNOR}
FROM (SELECT :box AS id) me LEFT JOIN pauses ON pauses.inbox_id = me.id"""


class Ready(NamedTuple):
    """What a run found before it claimed: the timers its scheduler pass fired, and the
    pause that keeps it from claiming (None: it may claim)."""

    fired: int
    paused: Pause | None


class Taken(NamedTuple):
    """A watching run's pass and claim (:meth:`Store.take`): the timers it fired, the
    pause that kept it from claiming, and its claim (None: paused, or the lease lost)."""

    fired: int
    paused: Pause | None
    claimed: Claimed | None


def _not_now(rows: list[Row]) -> bool:
    """From a :data:`_READY` read: a timer is due or a pause stands, so the run must
    make its pass and weigh the gate before it claims."""
    return bool(rows[0][0]) or governor_of(rows[0][1:]).pause is not None


class Store(Traffic, Inbox, Leases, Runs, Timers, Links, Approvals, Outbox, Prune,
            Canonicalise, State, Steps, Pauses):
    """One user's inbox: events, lease, runs, timers, approvals, outbox, state, steps and
    pauses."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> Status:
        """Counts per state (every state present), the lease, and the next timer."""
        reader = self._read()
        counts = self.engine.counts(reader)
        return Status(counts["events"], counts["outbox"], self.lease(), next_due(reader),
                      self.paused())

    def vitals(self) -> Vitals:
        """The status, plus what an operator watches: the oldest pending event's
        arrival, the last run, prune and activity, and the bytes on disk."""
        reader = self._read()
        row = reader.one(_READINGS)
        assert row is not None
        oldest, last_run, last_prune, *moments = (None if v is None else int(v) for v in row)
        known = [m for m in (last_run, *moments) if m is not None]
        return Vitals(self.status(), oldest, last_run, last_prune, max(known) if known else None,
                      self.engine.disk_bytes(reader))

    def ready(self, now: int, day: tuple[int, int], policy: Policy) -> Ready:
        """A scheduler pass (:meth:`tick`), then the gate (:meth:`gate`), both decided
        from one read: a watcher's wake-up costs one round trip before its claim where
        there is nothing to fire and no pause to weigh."""
        reader = self._read()
        row = reader.one(_READY, now=now)
        assert row is not None
        fired = self._fire(now, policy) if row[0] else 0
        return Ready(fired, self._gate_of(governor_of(row[1:]), reader, now, day, policy))

    def take(self, holder: str, generation: int, now: int, day: tuple[int, int],
             policy: Policy) -> Taken:
        """:meth:`ready`, then :meth:`claim`: what a watching run does when woken.

        Where no budget is set, the claim's first message also makes the
        :meth:`ready` read, and the claim goes on when no timer is due and no pause
        stands (the usual wake-up): two round trips in all, not three. Otherwise it
        is given up before writing anything, and the pass and the gate come first.
        """
        from agentbox.rules.breaker import budgeted

        if not budgeted(policy):
            try:
                return Taken(0, None, self.claim(holder, generation, now, policy,
                                                 ((_READY, {"now": now}), _not_now)))
            except NotNow:
                pass
        fired, paused = self.ready(now, day, policy)
        if paused is not None:
            return Taken(fired, paused, None)
        return Taken(fired, None, self.claim(holder, generation, now, policy))

    def waiter(self) -> Waiter:
        """A :class:`~agentbox.ledger.engine.Waiter` on this inbox, blind to changes made
        through this store."""
        return self.engine.waiter(lambda: self._read().box or None)

    def checks(self) -> list[Check]:
        """The backend's own health checks: integrity, schema version, permissions,
        journal size (see :mod:`agentbox.rules.health`)."""
        return self.engine.checks()
