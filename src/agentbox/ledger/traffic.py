"""What an inbox received and said, read back in time order for an export.

Three reads, each bounded to a window of time (``since`` inclusive, ``until``
exclusive, either open): the events that arrived (every source but approval
answers, whose events an answer makes), the approval answers history recorded,
and the dispatches that went or may have gone out. They read only what
retention still holds: a pruned event or dispatch is not there to read.
"""

from __future__ import annotations

from typing import Any

from agentbox.ledger.inbox import COLUMNS, Inbox, event_of, store_in
from agentbox.rules.records import Answered, Event, IngestResult, Spoke


def _window(column: str, since: int | None, until: int | None) -> tuple[str, dict[str, Any]]:
    where, params = "", {}
    if since is not None:
        where, params["since"] = f" AND {column} >= :since", since
    if until is not None:
        where, params["until"] = where + f" AND {column} < :until", until
    return where, params


class Traffic(Inbox):
    """The recorded traffic of the inbox: arrivals, approval answers, sends (and, for a
    rehearsal's inbox, those arrivals delivered again)."""

    def arrivals(self, since: int | None = None, until: int | None = None) -> list[Event]:
        """Events that arrived in the window, in arrival order; approval outcomes are left
        out (an answer or an expiry makes them, see :meth:`answers`)."""
        from agentbox.rules.approvals import SOURCE

        where, params = _window("created_at", since, until)
        rows = self._read().rows(
            f"""SELECT {COLUMNS} FROM events WHERE inbox_id = :box AND source <> :approval
                {where} ORDER BY created_at, id""", approval=SOURCE, **params)
        return [event_of(row) for row in rows]

    def answers(self, since: int | None = None, until: int | None = None) -> list[Answered]:
        """Approval answers given in the window, in the order they were given."""
        from agentbox.rules.approvals import answered_reply

        where, params = _window("at", since, until)
        rows = self._read().rows(
            f"""SELECT at, subject_id, detail FROM history
                WHERE inbox_id = :box AND subject = 'approval' AND action = 'answered'
                {where} ORDER BY at, id""", **params)
        found = [(int(at), str(rid), answered_reply(detail)) for at, rid, detail in rows]
        return [Answered(at, rid, reply) for at, rid, reply in found if reply is not None]

    def sends(self, since: int | None = None, until: int | None = None) -> list[Spoke]:
        """Dispatches claimed in the window that went out or may have (sending, sent,
        uncertain), in claim order."""
        from agentbox.rules.outbox import SPOKE_STATES

        where, params = _window("claimed_at", since, until)
        spoke = ", ".join(f"'{s}'" for s in SPOKE_STATES)
        rows = self._read().rows(
            f"""SELECT claimed_at, channel, body, state, urgent FROM dispatches
                WHERE inbox_id = :box AND state IN ({spoke}) {where}
                ORDER BY claimed_at, seq""", **params)
        return [Spoke(int(at), str(channel), str(body), str(state), bool(urgent))
                for at, channel, body, state, urgent in rows]

    def arrive(self, source: str, source_id: str, payload: str, now: int,
               max_payload: int) -> IngestResult:
        """A recorded arrival delivered again, into a rehearsal's inbox: a delivery from
        outside through :meth:`ingest`; a timer's firing stored as the scheduler stores
        it (its source is agentbox's own), so a firing the rehearsed handler's own timer
        also makes is one event."""
        from agentbox.rules import timers
        from agentbox.rules.keys import check_key

        if source != timers.SOURCE:
            return self.ingest(source, source_id, payload, now, max_payload=max_payload)
        check_key(source, source_id)
        with self._locked() as (tx, _):
            return store_in(self.engine, tx, source, source_id, payload, now,
                            record_conflict=False)

    def finished_twice(self) -> list[tuple[int, int]]:
        """(event id, times) of every event whose story says it finished more than once:
        a run's fenced finish should make that impossible."""
        rows = self._read().rows(
            """SELECT subject_id, COUNT(*) FROM history
               WHERE inbox_id = :box AND subject = 'event' AND action = 'finished'
               GROUP BY subject_id HAVING COUNT(*) > 1 ORDER BY subject_id""")
        return [(int(i), int(n)) for i, n in rows]
