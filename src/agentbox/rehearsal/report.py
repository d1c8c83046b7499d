"""A rehearsal's report: what was sent beside what would have been, the totals, and the
promises checked against the scratch inbox the rehearsal leaves.

The sends are set side by side as the longest common run of (channel, body)
in order (:class:`difflib.SequenceMatcher`); between those runs, a send at the
same moment as one recorded is its replacement. Each pair is marked: ``=``
the same body at the same time, ``~`` the same body at another time, ``≠`` a
different body at the same time, ``-`` sent then and not now, ``+`` sent now
and not then.

What the promises can see is the store's story and the runs the rehearsal
made; they cannot see inside the handler. A run cut short by a fault may have
done anything the handler does outside agentbox (an e-mail, an API call)
before it died; when the same event is then handed to the handler again, the
report names the event and the runs as a repeated effect, whether or not the
handler did anything the second time round. A journaled step that ran more than
once (a try killed inside it, at-least-once) is named the same way: its work
saw the same ``AGENTBOX_STEP_KEY`` each time, which the API it calls can
deduplicate on.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentbox.ledger.store import Store
from agentbox.rehearsal.play import Played, Run, Send
from agentbox.rehearsal.traffic import Recording
from agentbox.rules.policy import Policy
from agentbox.rules.records import Spoke

SAME, MOVED, CHANGED, GONE, NEW = "=", "~", "≠", "-", "+"
FAULTED = ("killed", "stalled")  # a run's outcomes a fault made; not the handler's failure


@dataclass(frozen=True)
class Pair:
    mark: str
    recorded: Spoke | None
    rehearsed: Send | None

    def document(self) -> dict[str, Any]:
        def side(at: int, channel: str, body: str, urgent: bool) -> dict[str, Any]:
            return {"at": at, "channel": channel, "body": body, "urgent": urgent}

        r, n = self.recorded, self.rehearsed
        return {"mark": self.mark,
                "recorded": None if r is None else side(r.at, r.channel, r.body, r.urgent),
                "rehearsed": None if n is None else side(n.at, n.channel, n.body, n.urgent)}


def pair_sends(recorded: Sequence[Spoke], rehearsed: Sequence[Send]) -> list[Pair]:
    """What was sent beside what would have been, each pair marked."""
    then = [(s.channel, s.body) for s in recorded]
    now = [(s.channel, s.body) for s in rehearsed]
    pairs: list[Pair] = []
    matcher = difflib.SequenceMatcher(None, then, now, autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        olds, news = list(recorded[a0:a1]), list(rehearsed[b0:b1])
        if op == "equal":
            pairs.extend(Pair(SAME if o.at == n.at else MOVED, o, n)
                         for o, n in zip(olds, news, strict=True))
            continue
        pairs.extend(_by_time(olds, news))
    return pairs


def _by_time(olds: list[Spoke], news: list[Send]) -> list[Pair]:
    """Sends that differ, in time order: a body sent at the same moment as another was is
    its replacement; the others were sent only then, or only now."""
    pairs: list[Pair] = []
    while olds or news:
        if olds and news and olds[0].at == news[0].at:
            pairs.append(Pair(CHANGED, olds.pop(0), news.pop(0)))
        elif olds and (not news or olds[0].at < news[0].at):
            pairs.append(Pair(GONE, olds.pop(0), None))
        else:
            pairs.append(Pair(NEW, None, news.pop(0)))
    return pairs


@dataclass(frozen=True)
class Promise:
    name: str
    says: str
    broken: tuple[str, ...] = ()

    @property
    def held(self) -> bool:
        return not self.broken

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "says": self.says, "held": self.held,
                "broken": list(self.broken)}


def _lost(traffic: Recording, store: Store) -> tuple[str, ...]:
    stored = {(e.source, e.source_id) for e in store.arrivals()}
    return tuple(f"{a.source}/{a.key} (arrived {a.at}) is not in the inbox"
                 for a in traffic.arrivals if (a.source, a.key) not in stored)


def _twice(store: Store) -> tuple[str, ...]:
    said = []
    for event_id, times in store.finished_twice():
        event = store.event(event_id)
        name = f"{event.source}/{event.source_id}" if event is not None else f"event {event_id}"
        said.append(f"{name} was recorded done {times} times")
    return tuple(said)


def _sent_twice(played: Played, policy: Policy) -> tuple[str, ...]:
    if policy.delivery != "at-most-once":
        return ()
    keys: dict[str, int] = {}
    messages: dict[int, list[str]] = {}
    for send in played.sends:
        keys[send.key] = keys.get(send.key, 0) + 1
        for message in send.message_ids:
            messages.setdefault(message, []).append(send.key)
    said = [f"dispatch {k} went out {n} times" for k, n in keys.items() if n > 1]
    said += [f"message {m} went out in {', '.join(ks)}" for m, ks in messages.items()
             if len(ks) > 1]
    return tuple(said)


def _done_again(played: Played, store: Store) -> tuple[str, ...]:
    """Done steps whose work ran again: a try the journal began after the step's
    ``done``, or more tries run than the journal counts."""
    ran = Counter(played.step_tries)
    said = []
    for step in store.steps("done"):
        actions = [entry.action for entry in store.history("step", step.key)]
        if "started" in actions[actions.index("done") + 1:]:
            said.append(f"step {step.key!r} began again after it was done")
        elif ran[step.key] > step.attempts:
            said.append(f"step {step.key!r} ran {ran[step.key]} times; the journal "
                        f"counts {step.attempts} tries")
    return tuple(said)


def promises(traffic: Recording, played: Played, store: Store, policy: Policy) -> list[Promise]:
    """Every promise the report can check, each with what broke it."""
    return [
        Promise("nothing lost", "every recorded arrival is in the inbox",
                _lost(traffic, store)),
        Promise("handled once", "no event is recorded done twice (at-least-once hands an "
                "event over again only when its run did not finish)", _twice(store)),
        Promise("sent at most once", "in at-most-once delivery no dispatch and no message "
                "goes out twice", _sent_twice(played, policy)),
        Promise("done steps ran once", "no journaled step runs again once it is done",
                _done_again(played, store)),
    ]


@dataclass(frozen=True)
class Repeat:
    """An event handed to the handler again after a run of it was cut short."""

    source: str
    key: str
    runs: tuple[tuple[int, str], ...]  # (run number, outcome), in order

    def document(self) -> dict[str, Any]:
        return {"event": f"{self.source}/{self.key}",
                "runs": [{"run": n, "outcome": o} for n, o in self.runs]}


def repeats(played: Played, store: Store) -> list[Repeat]:
    """Events whose handler ran again after a killed or stalled run of them."""
    seen: dict[int, list[tuple[int, str]]] = {}
    for run in played.runs:
        for event_id in run.events:
            seen.setdefault(event_id, []).append((run.n, run.outcome))
    found = []
    for event_id, runs in sorted(seen.items()):
        cut = [n for n, (_, outcome) in enumerate(runs) if outcome in FAULTED]
        if cut and cut[0] < len(runs) - 1:
            event = store.event(event_id)
            if event is not None:
                found.append(Repeat(event.source, event.source_id, tuple(runs)))
    return found


@dataclass(frozen=True)
class StepRepeat:
    """A journaled step whose work ran more than once (a try cut short, or failed)."""

    key: str
    tries: int
    status: str

    def document(self) -> dict[str, Any]:
        return {"step": self.key, "tries": self.tries, "status": self.status}


def step_repeats(played: Played, store: Store) -> list[StepRepeat]:
    """Steps the rehearsal saw run more than once, with how each stands now."""
    ran = Counter(played.step_tries)
    return [StepRepeat(step.key, ran[step.key], step.status) for step in store.steps()
            if ran[step.key] > 1]


@dataclass(frozen=True)
class Report:
    traffic: Recording
    played: Played
    pairs: list[Pair]
    promises: list[Promise]
    repeats: list[Repeat]
    step_repeats: list[StepRepeat]
    totals: dict[str, Any]
    settings_differ: list[tuple[str, Any, Any]] = field(default_factory=list)
    faults: str | None = None
    seed: int | None = None

    @property
    def differences(self) -> int:
        return sum(p.mark != SAME for p in self.pairs)

    @property
    def failures(self) -> list[Run]:
        return [r for r in self.played.runs if r.outcome not in ("done", *FAULTED)]

    @property
    def broken(self) -> list[Promise]:
        return [p for p in self.promises if not p.held]

    def exit_code(self, fail_on_diff: bool) -> int:
        """0 when every run finished and every promise held (and, with
        ``fail_on_diff``, nothing sent differs); 1 otherwise."""
        bad = bool(self.failures or self.broken or (fail_on_diff and self.differences))
        return 1 if bad else 0

    def document(self, fail_on_diff: bool) -> dict[str, Any]:
        header = self.traffic.header
        return {
            "ok": self.exit_code(fail_on_diff) == 0,
            "exit_code": self.exit_code(fail_on_diff),
            "traffic": {"user": header.user, "since": header.since, "until": header.until,
                        "exported_at": header.exported_at,
                        "arrivals": len(self.traffic.arrivals),
                        "answers": len(self.traffic.answers),
                        "sends": len(self.traffic.sends)},
            "faults": self.faults, "seed": self.seed,
            "settings_differ": [{"setting": k, "exported": a, "in_force": b}
                                for k, a, b in self.settings_differ],
            "sends": [p.document() for p in self.pairs],
            "differences": self.differences,
            "totals": self.totals,
            "failures": [{"run": r.n, "at": r.at, "outcome": r.outcome, "error": r.error}
                         for r in self.failures],
            "promises": [p.document() for p in self.promises],
            "repeated": [r.document() for r in self.repeats],
            "repeated_steps": [r.document() for r in self.step_repeats],
        }


def totals(played: Played, store: Store) -> dict[str, Any]:
    events = store.status().events
    approvals = store.approvals(played.end)
    usage = store.usage()
    steps = Counter(step.status for step in store.steps())
    outcomes: dict[str, int] = {}
    for run in played.runs:
        outcomes[run.outcome] = outcomes.get(run.outcome, 0) + 1
    return {
        "runs": len(played.runs),
        "done": outcomes.get("done", 0),
        "failed": sum(n for o, n in outcomes.items() if o not in ("done", *FAULTED)),
        "killed": outcomes.get("killed", 0),
        "stalled": outcomes.get("stalled", 0),
        "events": played.delivered,
        "duplicates": played.duplicates,
        "refused": len(played.refused),
        "dead": events.get("dead", 0),
        "unfinished": events.get("pending", 0) + events.get("running", 0),
        "approvals": len(approvals),
        "approved": sum(a.outcome == "yes" for a in approvals),
        "declined": sum(a.outcome == "no" for a in approvals),
        "expired": sum(a.outcome == "expired" for a in approvals),
        "timers_fired": played.timers_fired,
        "sends": len(played.sends),
        "steps": sum(steps.values()),
        "steps_done": steps["done"],
        "steps_uncertain": steps["uncertain"],
        "step_tries": len(played.step_tries),
        "tokens": sum(u.tokens or 0 for u in usage),
        "cost": round(sum(u.cost or 0.0 for u in usage), 6),
    }


def settings_differ(traffic: Recording, policy: Policy) -> list[tuple[str, Any, Any]]:
    """The settings the export was made under that differ from those in force."""
    exported = traffic.header.settings
    return [(k, exported[k], v) for k, v in policy._asdict().items()
            if k in exported and exported[k] != v]


def report(traffic: Recording, played: Played, store: Store, policy: Policy,
           faults: str | None = None, seed: int | None = None) -> Report:
    return Report(traffic, played, pair_sends(traffic.sends, played.sends),
                  promises(traffic, played, store, policy), repeats(played, store),
                  step_repeats(played, store), totals(played, store),
                  settings_differ(traffic, policy), faults, seed)
