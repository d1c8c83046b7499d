"""The inboxes' vitals in Prometheus's text exposition format (version 0.0.4).

Written by hand rather than with prometheus_client: the format needs a
HELP and a TYPE line per family and one escaped line per sample, about
forty lines here, while importing prometheus_client costs about 100 ms
(it pulls in its HTTP server and threading) and would be a dependency of
every install for one command. The tests parse this output with
prometheus_client's own parser, a test-only dependency.

Every family is a gauge labelled by ``user``. A moment that has not
happened yet (no run so far, no timer set) has no sample rather than a
zero, which an alert would read as 1970.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentbox.ledger.status import Vitals

Sample = tuple[dict[str, str], float]

FAMILIES: tuple[tuple[str, str, Callable[[Vitals, int], list[Sample]]], ...] = (
    ("agentbox_events", "Events in the inbox, by state.",
     lambda v, now: [({"state": s}, n) for s, n in v.status.events.items()]),
    ("agentbox_outbox_messages", "Messages in the outbox, by state.",
     lambda v, now: [({"state": s}, n) for s, n in v.status.outbox.items()]),
    ("agentbox_oldest_pending_age_seconds",
     "Seconds since the oldest pending event arrived (0 when nothing is pending).",
     lambda v, now: [({}, 0 if v.oldest_pending is None else max(0, now - v.oldest_pending))]),
    ("agentbox_lease_generation", "Generation of the inbox's lease (0: never taken).",
     lambda v, now: [({}, 0 if v.status.lease is None else v.status.lease.generation)]),
    ("agentbox_last_run_timestamp_seconds", "When a run last claimed work (Unix seconds).",
     lambda v, now: [] if v.last_run is None else [({}, v.last_run)]),
    ("agentbox_next_timer_timestamp_seconds", "When the next timer is due (Unix seconds).",
     lambda v, now: [] if v.status.next_timer is None else [({}, v.status.next_timer.due)]),
    ("agentbox_inbox_bytes", "Bytes the inbox takes on disk.",
     lambda v, now: [({}, v.bytes)]),
    ("agentbox_paused", "1 while the inbox is paused (a tripped breaker or a spent budget), "
     "labelled with the reason; 0 with an empty reason otherwise.",
     lambda v, now: [({"reason": ""}, 0) if v.status.paused is None
                     else ({"reason": v.status.paused.reason}, 1)]),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def exposition(inboxes: Sequence[tuple[str, Vitals]], now: int) -> str:
    """Every family, each with its HELP and TYPE lines and one sample per user (and state)."""
    lines: list[str] = []
    for name, help_text, samples in FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for user, vitals in inboxes:
            for labels, value in samples(vitals, now):
                pairs = ",".join(f'{k}="{_label(v)}"' for k, v in {"user": user, **labels}.items())
                lines.append(f"{name}{{{pairs}}} {_number(value)}")
    return "\n".join(lines) + "\n"
