"""What a store reports of an inbox as a whole: its status and its vitals.

Named tuples whose annotations are evaluated as the module loads (postponed,
every field would cost a compile), as in :mod:`agentbox.rules.records`:
`agentbox ingest` loads this module on every delivery.
"""

from typing import TYPE_CHECKING, NamedTuple

from agentbox.rules.records import Lease

if TYPE_CHECKING:
    from agentbox.rules.breaker import Pause
    from agentbox.rules.timers import Timer


class Status(NamedTuple):
    events: dict[str, int]
    outbox: dict[str, int]
    lease: Lease | None
    next_timer: "Timer | None"
    paused: "Pause | None" = None


class Vitals(NamedTuple):
    """What an operator watches on one inbox (``inboxes``, ``metrics``, ``doctor``)."""

    status: Status
    oldest_pending: int | None  # when the oldest pending event (lowest id) arrived
    last_run: int | None        # when a run last claimed (finding work or not)
    last_prune: int | None      # when a prune last completed
    last_activity: int | None   # the latest transition recorded, or the last run
    bytes: int                  # what the inbox takes on disk (for SQLite: file + WAL)
