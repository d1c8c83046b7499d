"""The journal of steps: a step's try begins behind the lease fence and ends recorded.

:meth:`Steps.begin_step` is the fence and the memo in one transaction holding
the inbox's lock: a worker that lost its lease is told so before it starts
anything, a ``done`` KEY hands back its recorded stdout, and a new try is
recorded ``started`` before its command runs (durably only where it must be:
at-most-once). :meth:`Steps.end_step` is not
fenced: a done step's result is worth keeping even if the lease moved on
meanwhile (its side effect happened either way, and the next try would
otherwise repeat it); it is refused only when a newer try of the KEY began.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentbox.ledger import history
from agentbox.ledger.core import Core

if TYPE_CHECKING:
    from agentbox.rules.steps import Begun, Outcome, Step

_COLUMNS = ("key, status, attempts, generation, started_at, finished_at, exit_code, output, "
            "error")


def _step(row: tuple[Any, ...]) -> Step:
    from agentbox.rules.steps import Step

    key, status, attempts, generation, started, finished, code, output, error = row
    return Step(str(key), str(status), int(attempts), int(generation), int(started),
                None if finished is None else int(finished), None if code is None else int(code),
                None if output is None else bytes(output), error)


class Steps(Core):
    """Journaled steps: begin behind the fence, end recorded, list, show, resolve."""

    def begin_step(self, holder: str, generation: int, key: str, now: int,
                   mode: str) -> Begun:
        """Check the fence, then what the journal says of ``key``, in one transaction:
        ``fenced`` (nothing recorded), ``memo`` (with the output), ``uncertain``
        (parked, nothing to run) or ``run`` (recorded ``started`` as ``attempt``)."""
        from agentbox.rules.lease import holds
        from agentbox.rules.steps import Begun, check_key, check_mode, decide

        check_key(key)
        check_mode(mode)
        # At-least-once may lose a `started` line to a power cut (not to a crash of any
        # process): the step then runs again, as at-least-once allows; at-most-once
        # must never lose one, or it would run a step twice.
        with self._locked(durable=mode == "at-most-once") as (tx, lease):
            if not holds(lease, holder, generation, now):
                return Begun("fenced")
            row = tx.one("""SELECT status, attempts, output FROM steps
                            WHERE inbox_id = :box AND key = :key""", key=key)
            found = None if row is None else (str(row[0]), int(row[1]))
            decision = decide(found, mode)
            if decision.action == "memo":
                assert row is not None
                return Begun("memo", decision.attempt, b"" if row[2] is None else bytes(row[2]))
            if decision.action == "uncertain":
                assert found is not None
                if found[0] != "uncertain":
                    tx.run("""UPDATE steps SET status = 'uncertain', finished_at = :now,
                                  error = :error WHERE inbox_id = :box AND key = :key""",
                           key=key, now=now, error="started, never finished (at-most-once)")
                    history.record(tx, now, "step", key, "uncertain", generation,
                                   f"attempt {decision.attempt} never finished")
                return Begun("uncertain", decision.attempt)
            params = {"key": key, "attempt": decision.attempt, "gen": generation, "now": now}
            if row is None:
                tx.run("""INSERT INTO steps (inbox_id, key, status, attempts, generation,
                                             started_at)
                          VALUES (:box, :key, 'started', :attempt, :gen, :now)""", **params)
            else:
                tx.run("""UPDATE steps SET status = 'started', attempts = :attempt,
                              generation = :gen, started_at = :now, finished_at = NULL,
                              exit_code = NULL, output = NULL, error = NULL
                          WHERE inbox_id = :box AND key = :key""", **params)
            history.record(tx, now, "step", key, "started", generation,
                           f"attempt {decision.attempt}")
            return Begun("run", decision.attempt)

    def end_step(self, key: str, generation: int, attempt: int, outcome: Outcome,
                 now: int) -> bool:
        """Record how a try ended; False (nothing written) when a newer try began."""
        with self._write() as tx:
            ended = tx.one("""UPDATE steps SET status = :status, finished_at = :now,
                                  exit_code = :code, output = :output, error = :error
                              WHERE inbox_id = :box AND key = :key AND status = 'started'
                                AND attempts = :attempt AND generation = :gen
                              RETURNING 1""",
                           key=key, status=outcome.status, now=now, code=outcome.exit_code,
                           output=outcome.output, error=outcome.error, attempt=attempt,
                           gen=generation)
            if ended is None:
                return False
            history.record(tx, now, "step", key, outcome.status, generation,
                           f"attempt {attempt}" + (f"; {outcome.error}" if outcome.error else ""))
            return True

    def steps(self, status: str | None = None, latest: int | None = None) -> list[Step]:
        """The journal, oldest try first; only steps in ``status`` if given; only the
        ``latest`` tries begun last if given (a page of a long journal)."""
        params: dict[str, Any] = {} if status is None else {"status": status}
        where = "" if status is None else " AND status = :status"
        query = f"SELECT {_COLUMNS} FROM steps WHERE inbox_id = :box{where}"
        if latest is None:
            rows = self._read().rows(f"{query} ORDER BY started_at, key", **params)
        else:
            rows = self._read().rows(f"{query} ORDER BY started_at DESC, key DESC LIMIT :n",
                                     n=latest, **params)[::-1]
        return [_step(row) for row in rows]

    def step(self, key: str) -> Step | None:
        row = self._read().one(f"SELECT {_COLUMNS} FROM steps WHERE inbox_id = :box "
                               "AND key = :key", key=key)
        return None if row is None else _step(row)

    def resolve_step(self, key: str, done: bool, output: bytes | None, now: int) -> str | None:
        """Settle a step whose outcome is unknown (``uncertain``, or ``started`` and never
        finished) as an operator: ``done`` with ``output`` (a later try prints it and
        runs nothing) or not done (``failed``: a later try runs it). The state it was
        in, or None when there is no such KEY; a step in another state is left as it is."""
        with self._locked() as (tx, _):
            row = tx.one("SELECT status FROM steps WHERE inbox_id = :box AND key = :key",
                         key=key)
            if row is None:
                return None
            was = str(row[0])
            if was not in ("uncertain", "started"):
                return was
            tx.run("""UPDATE steps SET status = :status, finished_at = :now, exit_code = NULL,
                          output = :output, error = :error
                      WHERE inbox_id = :box AND key = :key""",
                   key=key, now=now, status="done" if done else "failed",
                   output=(output or b"") if done else None,
                   error=None if done else "resolved not done by an operator")
            history.record(tx, now, "step", key, "resolved", None,
                           "done" if done else "not done")
            return was
