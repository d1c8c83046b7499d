"""What the store hands back: plain records, the same from every backend.

Named tuples only (cheaper to define than dataclasses: `agentbox ingest` loads
this module on every delivery), their annotations evaluated as the module loads
(a postponed one costs the class a compile per field), no database types: a
caller above the store cannot tell which backend produced a record. The state
names live here too, so the CLI, the scenario runner and every backend share
one list. The records of timers, approvals, the outbox, pruning and `doctor`
live beside their rules (rules.timers, rules.approvals, rules.outbox,
rules.retention, rules.health), so that an ingest defines none of them; an
inbox's status and vitals beside the store that reads them (ledger.store).
"""

from typing import Literal, NamedTuple

EVENT_STATES = ("pending", "running", "done", "dead")
OUTBOX_STATES = ("held", "sending", "sent", "uncertain")
OPEN_OUTBOX_STATES = ("held", "sending", "uncertain")
OUTBOX_LISTED = 1000  # messages an outbox listing shows when no limit is given: the newest
DISPATCH_STATES = ("sending", "sent", "failed", "uncertain", "unsent")
SETTLED_DISPATCH_STATES = ("sent", "failed", "unsent")
CATCH_UP_MODES = ("coalesce", "each")
DELIVERY_MODES = ("at-least-once", "at-most-once")

IngestOutcome = Literal["stored", "duplicate", "conflict"]
SendOutcome = Literal["sent", "failed", "unknown"]
AddOutcome = Literal["added", "unchanged", "replaced"]

DEFAULT_CHANNEL = "default"  # today's top-level outbox settings; every message's unless named


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


class Answered(NamedTuple):
    """An approval answer as history recorded it: when, which request, which reply."""

    at: int
    approval: str
    reply: str


class Spoke(NamedTuple):
    """A dispatch that went (or may have gone) out: when it was claimed, on which channel,
    the merged body, its state (sending, sent or uncertain) and whether it was urgent."""

    at: int
    channel: str
    body: str
    state: str
    urgent: bool
