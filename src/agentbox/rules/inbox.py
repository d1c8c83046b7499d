"""Attempts and poison: which events a run claims, and what a failure leads to.

Attempts are counted when an event is claimed, so a worker that crashes
still uses one up. Events left running by an older generation lost their
worker and are retried; a pending event out of attempts goes dead; a retried
event is claimed alone, so a poison event cannot drag healthy ones down with
it; a handler error on the last attempt is final at once. A stop someone asked
for (SIGTERM, Ctrl-C) is not the event's fault: its attempt is given back, so
it never moves an event towards dead, while a crash still uses one up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from agentbox.clock import check_time
from agentbox.rules.lease import taken
from agentbox.rules.policy import Policy
from agentbox.rules.records import Entry, Lease


class AfterFailure(NamedTuple):
    status: str          # 'pending' (retry) or 'dead'
    available_at: int    # when a retry may be claimed
    dead_reason: str | None


def stored_entry(event_id: int, created_at: int) -> Entry:
    """The first line of every event's story, read from the event itself: writing it
    as a history row would cost every ingest a second insert."""
    return Entry(created_at, "event", str(event_id), "stored", None, None)


def batch(oldest_retry: int | None, oldest_fresh: Sequence[int], policy: Policy) -> list[int]:
    """The ids one run claims: a retried event alone, else the oldest up to ``max_batch``."""
    if oldest_retry is not None:
        return [oldest_retry]
    return list(oldest_fresh[:policy.max_batch])


def retry_at(attempts: int, now: int, policy: Policy) -> int:
    """When an event that failed its ``attempts``-th try may be claimed again: after
    the backoff, which may not reach past the year 9999."""
    return check_time(now + policy.backoff(attempts), "a retry would be at")


def abandoned(generation: int | None, attempts: int, now: int,
              policy: Policy) -> tuple[int, str]:
    """An event still running under an older generation: (available_at, error)."""
    return (retry_at(attempts, now, policy),
            f"worker of generation {generation} lost its lease during attempt {attempts}")


def out_of_attempts(attempts: int, policy: Policy) -> bool:
    return attempts >= policy.max_attempts


def exhausted(attempts: int, last_error: str | None) -> str:
    """The error a pending event carries when it goes dead for want of attempts."""
    return f"too many attempts ({attempts})" + (f"; last: {last_error}" if last_error else "")


def exhausted_reason(policy: Policy) -> str:
    return f"reached max_attempts {policy.max_attempts}"


def after_failure(attempts: int, now: int, policy: Policy) -> AfterFailure:
    """A handler error: retry after the backoff, or dead at once on the last attempt."""
    available_at = retry_at(attempts, now, policy)
    if out_of_attempts(attempts, policy):
        return AfterFailure("dead", available_at, f"failed on its last attempt ({attempts} of "
                                                  f"{policy.max_attempts})")
    return AfterFailure("pending", available_at, None)


def given_back(attempts: int) -> int:
    """The attempts an event keeps after an asked-for stop gave its claim back."""
    return max(attempts - 1, 0)


def interrupted(attempts: int) -> str:
    """The history detail of a claim given back by an asked-for stop."""
    return f"run stopped; attempt {attempts} given back"


def next_work(first_available: int | None, next_timer: int | None, running: bool,
              lease: Lease | None, now: int) -> int | None:
    """When a run next has something to do in an inbox, or None when nothing is scheduled.

    ``first_available`` is the earliest ``available_at`` of a pending event,
    ``next_timer`` the next timer's due time. Events left ``running`` are
    retried by the first claim after their lease ends, so they count from the
    end of the lease (at once when it is released, or there is none). A time
    at or before ``now`` means there is work now.
    """
    times = [t for t in (first_available, next_timer) if t is not None]
    if running:
        times.append(lease.until + 1 if lease is not None and taken(lease, now) else now)
    return min(times) if times else None
