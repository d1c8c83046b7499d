"""Channels: each its own gap, keys, quiet hours and cap; none waits for another; the
default channel is the outbox as it was, for configs and inboxes made before channels."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox import paths
from agentbox.ledger.store import Store
from agentbox.rules.answer import Answer, Message
from agentbox.rules.outbox import Dispatch, Wait
from agentbox.rules.quiet import Limits
from support.clock import T0
from support.store import run, schema_before

GAP = 3600


def speak(store: Store, now: int, *messages: Message) -> None:
    run(store, f"speaker-{now}-{len(messages)}", now, Answer(messages=messages))


def claim(store: Store, now: int, channel: str = "default", gap: int = GAP,
          limits: Limits | None = None) -> Dispatch | Wait:
    return store.claim_dispatch(now, "at-least-once", gap, 60, channel=channel, limits=limits)


def sent(store: Store, now: int, channel: str = "default", gap: int = GAP,
         limits: Limits | None = None) -> Dispatch:
    got = claim(store, now, channel, gap, limits)
    assert isinstance(got, Dispatch), got
    assert store.settle_dispatch(got.key, "sent", now, attempt=got.tries)
    return got


def test_each_channel_keeps_its_own_gap_and_neither_waits_for_the_other(store: Store) -> None:
    speak(store, T0, Message("hi"), Message("sms hi", channel="sms"))
    first = sent(store, T0)
    other = sent(store, T0, "sms", gap=60)
    assert (first.body, other.body, other.channel) == ("hi", "sms hi", "sms")
    assert first.key != other.key
    speak(store, T0 + 10, Message("later"), Message("sms later", channel="sms"))
    assert claim(store, T0 + 59, "sms", gap=60) == Wait(1, T0 + 60, reason="gap")
    assert sent(store, T0 + 60, "sms", gap=60).body == "sms later"
    assert claim(store, T0 + 60) == Wait(1, T0 + GAP, reason="gap")
    assert sent(store, T0 + GAP).body == "later"


def test_an_urgent_message_takes_only_its_own_channels_held_messages(store: Store) -> None:
    speak(store, T0, Message("a"), Message("b", channel="pager"))
    sent(store, T0)
    sent(store, T0, "pager")
    speak(store, T0 + 5, Message("c"), Message("d", channel="pager"),
          Message("e", urgent=True, channel="pager"))
    urgent = sent(store, T0 + 5, "pager")
    assert (urgent.body, urgent.urgent) == ("d\n\ne", True)
    assert claim(store, T0 + 5) == Wait(1, T0 + GAP, reason="gap")


def test_quiet_hours_hold_non_urgent_messages_and_urgent_ones_when_told(store: Store) -> None:
    quiet = Limits(quiet_until=T0 + 500)
    speak(store, T0, Message("night"))
    assert claim(store, T0, limits=quiet) == Wait(1, T0 + 500, reason="quiet hours")
    speak(store, T0 + 1, Message("fire", urgent=True))
    strict = quiet._replace(urgent_in_quiet_hours=False)
    assert claim(store, T0 + 1, limits=strict) == Wait(2, T0 + 500, reason="quiet hours")
    assert sent(store, T0 + 1, limits=quiet).body == "night\n\nfire"


def test_max_per_day_counts_urgent_sends_and_holds_the_rest_until_the_next_day(
        store: Store) -> None:
    day = (T0, T0 + 86400)
    cap = Limits(day=day, max_per_day=2)
    speak(store, T0, Message("one", urgent=True))
    sent(store, T0, gap=0, limits=cap)
    speak(store, T0 + 1, Message("two"))
    sent(store, T0 + 1, gap=0, limits=cap)
    speak(store, T0 + 2, Message("three"))
    assert claim(store, T0 + 2, gap=0, limits=cap) == Wait(1, T0 + 86400, reason="max_per_day")
    speak(store, T0 + 3, Message("now", urgent=True))
    assert sent(store, T0 + 3, gap=0, limits=cap).body == "three\n\nnow"
    tomorrow = Limits(day=(T0 + 86400, T0 + 2 * 86400), max_per_day=2)
    speak(store, T0 + 86400, Message("four"))
    assert sent(store, T0 + 86400, gap=0, limits=tomorrow).body == "four"


def write_config(text: str) -> None:
    path = paths.config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


CHANNELS = """
[channels.sms]
sender = {sender}
gap = "1m"
delivery = "at-most-once"
"""


def test_dispatch_serves_every_channel_through_its_own_sender(
        cli: Callable[..., Any], handler: list[str], sender: Any, tmp_path: Path) -> None:
    write_config(f'sender = {json.dumps(sender.argv)}\n'
                 + CHANNELS.format(sender=json.dumps(sender.argv)))
    answer = json.dumps({"messages": ["by mail", {"body": "by sms", "channel": "sms"}]})
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    assert cli("run", "--", *handler, "--answer", answer, now=T0).code == 0
    listed = json.loads(cli("outbox", "--json", now=T0).out)
    assert [(m["body"], m["channel"]) for m in listed] == [("by mail", "default"),
                                                            ("by sms", "sms")]
    done = cli("dispatch", "--json", now=T0)
    assert done.code == 0, done.err
    doc = json.loads(done.out)["channels"]
    assert (doc["default"]["mode"], doc["sms"]["mode"]) == ("at-least-once", "at-most-once")
    assert sorted((c["channel"], c["body"]) for c in sender.calls()) == [
        ("default", "by mail"), ("sms", "by sms")]
    only = cli("dispatch", "--channel", "sms", "--json", now=T0 + 1)
    assert json.loads(only.out)["channel"] == "sms"
    assert cli("dispatch", "--channel", "fax", now=T0 + 1).code == 2


def test_a_message_for_an_unknown_channel_makes_the_answer_malformed(
        cli: Callable[..., Any], handler: list[str], open_inbox: Callable[..., Store]) -> None:
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    answer = json.dumps({"messages": [{"body": "x", "channel": "fax"}]})
    failed = cli("run", "--", *handler, "--answer", answer, now=T0)
    assert failed.code == 1
    assert "unknown channel 'fax'" in failed.err
    assert open_inbox().outbox(("held",)) == []


def test_quiet_hours_in_the_inbox_zone_are_said_by_dispatch_outbox_and_status(
        cli: Callable[..., Any], handler: list[str], sender: Any) -> None:
    write_config(f'timezone = "Europe/Berlin"\nsender = {json.dumps(sender.argv)}\n'
                 '[channels.default]\nquiet_hours = "22:00-07:00"\n')
    night = 1_796_158_800  # 2026-12-01T21:00:00Z, 22:00 in Berlin
    assert cli("ingest", "chat", "m1", now=night).code == 0
    assert cli("run", "--", *handler, now=night).code == 0
    held = cli("dispatch", "--json", now=night)
    assert json.loads(held.out)["reason"] == "quiet hours"
    assert json.loads(held.out)["next_send_at"] == night + 9 * 3600
    listed = json.loads(cli("outbox", "--json", now=night).out)
    assert listed[0]["held_reason"] == "quiet hours"
    status = json.loads(cli("status", "--json", now=night).out)
    assert status["held"] == {"default": {"messages": 1, "reason": "quiet hours",
                                          "until": night + 9 * 3600}}
    assert sender.calls() == []
    assert cli("dispatch", now=night + 9 * 3600).code == 0
    assert [c["body"] for c in sender.calls()] == ["handled m1"]


def test_an_inbox_made_before_channels_keeps_its_outbox_on_default(
        backend_name: str, monkeypatch: pytest.MonkeyPatch, open_inbox: Callable[..., Store],
        cli: Callable[..., Any], sender: Any) -> None:
    # channels came with SQLite's version 12 and PostgreSQL's 5
    with schema_before(backend_name, {"sqlite": 11, "postgres": 4}, monkeypatch):
        store = open_inbox()
        store.ingest("chat", "m1", "{}", T0)
        with store._write() as tx:
            tx.run("""INSERT INTO dispatches (inbox_id, seq, key, mode, state, body, urgent,
                                              claimed_at, deadline, tries, max_tries)
                      VALUES (:box, 1, 'old-1', 'at-least-once', 'sent', 'then', :no, :t,
                              :t, 1, 5)""", no=False, t=T0)
            tx.run("UPDATE inboxes SET dispatch_seq = 1 WHERE id = :box")
            for body in ("held one", "held two"):
                tx.run("""INSERT INTO outbox (inbox_id, body, urgent, created_at)
                          VALUES (:box, :body, :no, :t)""", body=body, no=False, t=T0)
        store.close()
    waiting = cli("dispatch", "--json", "--", *sender.argv, now=T0 + 10)
    assert waiting.code == 0 and waiting.out, waiting.err
    assert json.loads(waiting.out)["reason"] == "gap"  # the old send counts on default
    done = cli("dispatch", "--json", "--", *sender.argv, now=T0 + GAP)
    assert done.out, (done.code, done.err)
    assert json.loads(done.out)["channel"] == "default"
    assert [c["body"] for c in sender.calls()] == ["held one\n\nheld two"]
