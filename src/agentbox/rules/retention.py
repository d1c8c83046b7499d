"""What a prune may delete, and how long a pruned event's key is remembered.

An inbox operated for months must stop growing: done events, sent messages
and settled dispatches older than their keep setting are deleted with their
history. Deleting an event must not reopen its key, or a late redelivery
would be stored and run again: the key and the digest of the payload stay
until the dedupe window (counted from the event's arrival) has passed, so a
redelivery is still ``duplicate`` and a changed one still ``conflict``.

What is never pruned: pending, running and dead events (dead ones wait for
an operator, whatever their age); held, sending and uncertain messages; a
dispatch that still paces the outbox (the gap counts from the last send);
and approval outcomes, which are the approvals' own record (``approve list``
and ``approve answer`` read them). The newest event or message goes like any
other: ids are numbered above the highest ever handed out, not above the
highest left, so none is given out twice.
"""

from __future__ import annotations

from typing import NamedTuple

from agentbox.rules.approvals import SOURCE as APPROVAL_SOURCE
from agentbox.rules.policy import DAY, Policy


class PruneCounts(NamedTuple):
    """What a prune removed (or, in a dry run, would remove)."""

    events: int = 0          # done events, with their history
    messages: int = 0        # sent messages, with their history
    dispatches: int = 0      # settled dispatches, with their history
    keys_forgotten: int = 0  # remembered keys of pruned events past the dedupe window
    timer_history: int = 0   # timer history lines older than keep_done
    steps: int = 0           # done and failed steps finished before keep_done
    usage: int = 0           # what runs said they spent, before keep_done (two days kept)

    def plus(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(*(a + b for a, b in zip(self, other, strict=True)))

    @property
    def total(self) -> int:
        return sum(self)


PRUNE_EVERY = DAY  # `run` prunes at most this often
USAGE_KEPT = 2 * DAY  # a budget's local day, whatever the zone, lies within this
KEPT_SOURCES = (APPROVAL_SOURCE,)
STEP = 500  # rows per prune transaction: short enough never to hold up an ingest for long


class Cutoffs(NamedTuple):
    """One prune's bounds, all fixed at its start (``now``)."""

    now: int
    done_before: int      # done events last changed before this go
    sent_before: int      # sent messages sent before this go
    dispatch_before: int  # settled dispatches finished before this go
    window: int           # a pruned key is remembered until its event's arrival + window
    usage_before: int     # what runs said they spent before this goes

    def remembered_until(self, created_at: int) -> int | None:
        """Until when a pruned event's key must be remembered; None if no longer."""
        until = created_at + self.window
        return until if until > self.now else None


def cutoffs(now: int, policy: Policy) -> Cutoffs:
    """The bounds of a prune at ``now``.

    A dispatch is kept while it still paces the outbox: pruning the last
    send must never shorten the gap, however short ``keep_sent`` is. What runs
    said they spent is kept while a budget may still add it up: its local day
    began at most a day and a timezone's offset ago, so two days at least.
    """
    return Cutoffs(now=now, done_before=now - policy.keep_done,
                   sent_before=now - policy.keep_sent,
                   dispatch_before=now - max(policy.keep_sent, policy.outbox_gap),
                   window=policy.dedupe_window,
                   usage_before=now - max(policy.keep_done, USAGE_KEPT))


def prune_due(last_prune: int | None, now: int, policy: Policy) -> bool:
    """Whether `run` prunes now: at most once a day, never with ``auto_prune`` off.

    A prune that a run left unfinished (it works in bounded slices) is not
    recorded, so the next run carries on with it.
    """
    if not policy.auto_prune:
        return False
    return last_prune is None or now - last_prune >= PRUNE_EVERY or now < last_prune


DIGEST_BYTES = 16  # 128 bits: no changed payload will ever pass for the same one


def digest(payload: str) -> bytes:
    """What is remembered of a pruned event's payload: the sha256 of its canonical JSON,
    cut to its first 16 bytes (tens of thousands of keys are remembered at a time)."""
    import hashlib  # only when pruning or meeting a pruned key: not on the ingest path

    return hashlib.sha256(payload.encode("utf-8")).digest()[:DIGEST_BYTES]
