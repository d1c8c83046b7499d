"""Deferred approvals that expire.

A request writes a one-off expiry timer whose event uses the approval's own
key ('approval', id), so the answer and the expiry compete for one inbox row
and only one outcome is ever stored. An answer checks the deadline itself,
in the same transaction, instead of trusting that the scheduler ran.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from agentbox.clock import check_time
from agentbox.errors import BadInput
from agentbox.jsonutil import canonical
from agentbox.rules.keys import check_key
from agentbox.rules.timers import EXPIRY_PREFIX, MAX_NAME_LENGTH, TimerSpec


class Approval(NamedTuple):
    id: str
    action: str
    requested_at: int
    expires_at: int
    outcome: str  # pending | yes | no | expired
    answered_at: int | None


SOURCE = "approval"
MAX_ID_LENGTH = MAX_NAME_LENGTH - len(EXPIRY_PREFIX)
ANSWERS = ("yes", "no")
OUTCOMES = (*ANSWERS, "expired")


def expiry_timer_name(request_id: str) -> str:
    return f"{EXPIRY_PREFIX}{request_id}"


def check_request_id(request_id: str) -> None:
    """An approval's id keys its outcome event and names its expiry timer: both must fit."""
    check_key(SOURCE, request_id)
    if len(request_id) > MAX_ID_LENGTH:
        raise BadInput(f"an approval id is at most {MAX_ID_LENGTH} characters: its expiry "
                       f"timer is named {EXPIRY_PREFIX}ID, of at most {MAX_NAME_LENGTH}")


def check_request(request_id: str, expires_in: int) -> None:
    check_request_id(request_id)
    if expires_in <= 0:
        raise BadInput("an approval must expire a positive number of seconds from now")


def check_reply(reply: str) -> None:
    if reply not in ANSWERS:
        raise BadInput(f"an answer is yes or no, not {reply!r}")


def event_body(request_id: str, outcome: str, action: str) -> str:
    """The inbox event that carries an approval's one outcome to the agent."""
    return canonical({"approval": request_id, "answer": outcome, "action": action})


def expiry_timer(request_id: str, now: int, expires_in: int, action: str) -> TimerSpec:
    """The one-off timer that expires a request; its deadline must be within 9999,
    and the request is refused (nothing stored) when it is not."""
    due = check_time(now + expires_in, f"approval {request_id!r} would expire at")
    return TimerSpec(name=expiry_timer_name(request_id), due=due, every=None,
                     payload=event_body(request_id, "expired", action), event_source=SOURCE,
                     event_id=request_id)


def expired(now: int, expires_at: int) -> bool:
    """At the deadline itself the request has expired, for answers and listings alike."""
    return now >= expires_at


def outcome(reply: str, now: int, expires_at: int) -> str:
    """What an answer given at ``now`` stores: the reply, or 'expired' past the deadline."""
    return "expired" if expired(now, expires_at) else reply


ANSWERED = " -> "  # an answer's history detail: "REPLY -> OUTCOME THAT STANDS"


def answered_detail(reply: str, stands: str) -> str:
    """What an answer's history line says: the reply given, and the outcome that stands."""
    return f"{reply}{ANSWERED}{stands}"


def answered_reply(detail: str | None) -> str | None:
    """The reply an answer's history line records (see :func:`answered_detail`)."""
    reply = (detail or "").partition(ANSWERED)[0]
    return reply if reply in ANSWERS else None


def standing(stored_payload: str) -> str:
    """The outcome an event under the approval's key carries; 'unknown' if it is no answer
    (an event ingested by hand under that key)."""
    try:
        found = json.loads(stored_payload).get("answer")
    except (ValueError, AttributeError):
        return "unknown"
    return found if found in OUTCOMES else "unknown"


def listed(stored_payload: str | None, now: int, expires_at: int) -> str:
    """A request's state for `approve list`: its stored outcome, else pending or expired."""
    found = "unknown" if stored_payload is None else standing(stored_payload)
    if found != "unknown":
        return found
    return "expired" if expired(now, expires_at) else "pending"
