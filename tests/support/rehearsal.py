"""The agent the rehearsal tests replay, and a day of its traffic made live.

:data:`AGENT` answers chat events with a message (urgent when the payload says so),
asks for an approval for a refund, follows up on a reminder with a timer, and
reports an approval's outcome. With ``$EFFECTS`` set it first appends
``SOURCE/KEY`` there for each event, as an e-mail sent outside agentbox would be,
then works a while, so a kill lands after the effect. Its first argument, when
given, replaces the "you said " it begins a reply with: the changed handler.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentbox.rehearsal.traffic import Recording

AGENT = r'''
import json, os, sys, time
prefix = sys.argv[1] if len(sys.argv) > 1 else "you said "
batch = json.load(sys.stdin)
effects = os.environ.get("EFFECTS")
answer = {"messages": [], "approvals": [], "timers": []}
for e in batch["events"]:
    p = e["payload"]
    if effects:
        with open(effects, "a") as fh:
            fh.write(e["source"] + "/" + e["source_id"] + "\n")
        time.sleep(0.15)
    if e["source"] == "approval":
        answer["messages"].append({"body": p["action"] + ": " + p["answer"]})
    elif e["source"] == "timer":
        answer["messages"].append({"body": "follow-up " + p["timer"]})
    elif p.get("refund"):
        answer["approvals"].append({"id": "refund-" + e["source_id"], "expires_in": "1h",
                                    "action": "refund " + e["source_id"]})
    else:
        answer["messages"].append({"body": prefix + p["text"], "urgent": bool(p.get("urgent"))})
        if p.get("remind"):
            answer["timers"].append({"name": "remind-" + e["source_id"], "in": "30m",
                                     "payload": {}})
json.dump(answer, sys.stdout)
'''

# The same day's agent sending each chat reply's e-mail inside a journaled step, keyed by
# the event: the step's work appends "KEY ATTEMPT" to $EFFECTS, then works a while, so a
# kill inside the step lands after the e-mail went out and before its end is recorded.
# $STEP_MODE, when set, is the steps' mode.
STEPPING_AGENT = r'''
import os, time
from agentbox.handler import Reply, handler

def mailer(key):
    def send(attempt):
        with open(os.environ["EFFECTS"], "a") as fh:
            fh.write(f"{key} {attempt.attempt}\n")
        time.sleep(0.05)
        return "mailed"
    return send

@handler
def answer(batch):
    messages = []
    for e in batch.events:
        if e.source == "chat" and "text" in e.payload:
            key = "mail-" + e.source_id
            batch.step(key, mailer(key), mode=os.environ.get("STEP_MODE"))
            messages.append("you said " + e.payload["text"])
    return Reply(messages=messages)

answer.main()
'''

T0 = 1767225600  # 2026-01-01T00:00:00Z
# (seconds after T0, what happens): an arrival (source, key, payload) or an answer (id, reply)
DAY: list[tuple[int, tuple[Any, ...]]] = [
    (0, ("chat", "m0", {"text": "hello"})),
    (600, ("chat", "m1", {"text": "deploy?", "remind": True})),
    (900, ("chat", "m2", {"refund": True})),
    (1200, ("refund-m2", "yes")),
    (4000, ("chat", "m3", {"text": "the site is down", "urgent": True})),
    (5000, ("chat", "m4", {"refund": True})),
]
# Every other moment a watcher would act at: the reminder falls due, the gap ends, the
# unanswered approval expires.
MOMENTS = [2400, 3600, 7600, 8600]
END = T0 + 9000


def agent(folder: Path) -> list[str]:
    script = folder / "agent.py"
    script.write_text(AGENT)
    return [sys.executable, str(script)]


def stepping_agent(folder: Path) -> list[str]:
    script = folder / "stepping_agent.py"
    script.write_text(STEPPING_AGENT)
    return [sys.executable, str(script)]


def live_day(cli: Callable[..., Any], argv: list[str]) -> list[tuple[int, str]]:
    """The day lived through the commands, a run and a dispatch at every moment a
    watcher would make one; what dispatch printed, with when."""
    sent: list[tuple[int, str]] = []
    happenings = dict(DAY)
    for offset in sorted({*happenings, *MOMENTS}):
        now = T0 + offset
        what = happenings.get(offset)
        if what is not None and len(what) == 3:
            source, key, payload = what
            assert cli("ingest", source, key, "--payload", json.dumps(payload),
                       now=now).code == 0
        elif what is not None:
            assert cli("approve", "answer", *what, now=now).code == 0
        assert cli("run", "--until-empty", "--", *argv, now=now).code == 0
        while True:
            result = cli("dispatch", now=now)
            assert result.code == 0, result.err
            if not result.out:
                break
            sent.append((now, result.out[:-1]))
    return sent


def day_traffic() -> Recording:
    """The day's inputs as an export would hold them, with nothing recorded as sent."""
    from agentbox.jsonutil import canonical
    from agentbox.rehearsal.traffic import Arrival, Header
    from agentbox.rules.records import Answered

    traffic = Recording(Header("alice", None, None, None, END, {}))
    for offset, what in DAY:
        if len(what) == 3:
            source, key, payload = what
            traffic.arrivals.append(Arrival(T0 + offset, source, key, canonical(payload)))
        else:
            traffic.answers.append(Answered(T0 + offset, *what))
    return traffic
