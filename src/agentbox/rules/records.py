"""What the store hands back: plain records, the same from every backend.

Named tuples only (cheaper to define than dataclasses: `agentbox ingest` loads
this module on every delivery), no database types: a caller above
the store cannot tell which backend produced a record. The state names live
here too, so the CLI, the scenario runner and every backend share one list.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES

EVENT_STATES = ("pending", "running", "done", "dead")
OUTBOX_STATES = ("held", "sending", "sent", "uncertain")
OPEN_OUTBOX_STATES = ("held", "sending", "uncertain")
DISPATCH_STATES = ("sending", "sent", "failed", "uncertain", "unsent")
SETTLED_DISPATCH_STATES = ("sent", "failed", "unsent")
CATCH_UP_MODES = ("coalesce", "each")
DELIVERY_MODES = ("at-least-once", "at-most-once")

IngestOutcome = Literal["stored", "duplicate", "conflict"]
SendOutcome = Literal["sent", "failed", "unknown"]
AddOutcome = Literal["added", "unchanged", "replaced"]


class Event(NamedTuple):
    id: int
    source: str
    source_id: str
    payload: str  # canonical JSON object
    status: str
    attempts: int
    claim_gen: int | None
    available_at: int
    error: str | None
    created_at: int
    updated_at: int


class IngestResult(NamedTuple):
    outcome: IngestOutcome
    id: int
    source: str
    source_id: str


class Lease(NamedTuple):
    holder: str
    generation: int
    until: int  # held until then; once released, the time of the release
    released: bool = False  # free at any clock; the next taker bumps the generation


class Entry(NamedTuple):
    """One line of an event's (or message's, dispatch's, timer's) story."""

    at: int
    subject: str
    subject_id: str
    action: str
    generation: int | None
    detail: str | None


class TimerSpec(NamedTuple):
    """A timer as asked for: by `schedule add`, an approval request or a run's answer."""

    name: str
    due: int
    every: int | None
    payload: str = "{}"
    catch_up: str = "coalesce"
    event_source: str | None = None
    event_id: str | None = None
    # Asked for by a run: may re-arm a one-off timer, never replace a schedule.
    follow_up: bool = False
    cron: str | None = None  # a calendar schedule: a cron expression ...
    tz: str | None = None  # ... read in this IANA time zone


class Timer(NamedTuple):
    name: str
    due: int
    every: int | None
    payload: str
    catch_up: str
    event_source: str | None
    event_id: str | None
    done: bool
    created_at: int
    cron: str | None = None
    tz: str | None = None

    @property
    def recurring(self) -> bool:
        return self.every is not None or self.cron is not None


class Approval(NamedTuple):
    id: str
    action: str
    requested_at: int
    expires_at: int
    outcome: str  # pending | yes | no | expired
    answered_at: int | None


class Dispatch(NamedTuple):
    """A claimed send: these rows, merged into ``body``, under ``key``, try ``tries``."""

    key: str
    mode: str
    body: str
    message_ids: tuple[int, ...]
    urgent: bool
    tries: int
    deadline: int
    max_tries: int = DEFAULT_MAX_SEND_TRIES  # tries of this key, then uncertain (on the claim)

    @property
    def resend(self) -> bool:
        return self.tries > 1


class OutboxMessage(NamedTuple):
    id: int
    body: str
    urgent: bool
    state: str
    dispatch_key: str | None
    created_at: int
    sent_at: int | None
    error: str | None


class Wait(NamedTuple):
    """Nothing was claimed.

    ``until`` is when the gap allows the next send (None: no send yet);
    ``in_flight`` counts claims still inside their deadline, the earliest of
    which is ``in_flight_until``.
    """

    held: int
    until: int | None
    in_flight: int = 0
    in_flight_until: int | None = None


class Status(NamedTuple):
    events: dict[str, int]
    outbox: dict[str, int]
    lease: Lease | None
    next_timer: Timer | None


class Vitals(NamedTuple):
    """What an operator watches on one inbox (``inboxes``, ``metrics``, ``doctor``)."""

    status: Status
    oldest_pending: int | None  # when the oldest pending event (lowest id) arrived
    last_run: int | None        # when a run last claimed (finding work or not)
    last_prune: int | None      # when a prune last completed
    last_activity: int | None   # the latest transition recorded, or the last run
    bytes: int                  # what the inbox takes on disk (for SQLite: file + WAL)


class PruneCounts(NamedTuple):
    """What a prune removed (or, in a dry run, would remove)."""

    events: int = 0          # done events, with their history
    messages: int = 0        # sent messages, with their history
    dispatches: int = 0      # settled dispatches, with their history
    keys_forgotten: int = 0  # remembered keys of pruned events past the dedupe window
    timer_history: int = 0   # timer history lines older than keep_done

    def plus(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(*(a + b for a, b in zip(self, other, strict=True)))

    @property
    def total(self) -> int:
        return sum(self)


class Check(NamedTuple):
    """One line of `doctor`: what was checked, whether it is well, and what was found."""

    name: str
    ok: bool
    detail: str
