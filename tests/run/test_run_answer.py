"""The handler's answer, parsed whole, and the timer/approval rules it leans on."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput, DatabaseError, NotAsAsked
from agentbox.ledger.store import Store
from agentbox.rules.answer import ApprovalRequest, FollowUp, Message, TimerSpec, parse
from agentbox.rules.timers import Timer
from support.clock import T0
from support.store import plant


def timer(store: Store, name: str) -> Timer:
    return next(t for t in store.timers(include_done=True) if t.name == name)


def test_a_full_answer():
    answer = parse(b'{"messages": ["a", {"body": "b", "urgent": true}, {"body": "c"}],'
                   b' "approvals": [{"id": "r1", "expires_in": "4h", "action": "refund"}],'
                   b' "timers": [{"name": "t", "in": 90, "payload": {"z": 1, "a": 2}}]}')
    assert answer.messages == (Message("a"), Message("b", True), Message("c"))
    assert answer.approvals == (ApprovalRequest("r1", 4 * 3600, "refund"),)
    assert answer.timers == (FollowUp("t", 90, '{"a":2,"z":1}'),)
    spec = answer.timers[0].to_timer(T0)
    assert (spec.due, spec.every, spec.follow_up) == (T0 + 90, None, True)


@pytest.mark.parametrize("text", ["", "  \n", b""])
def test_empty_output_is_silence(text):
    answer = parse(text)
    assert (answer.messages, answer.approvals, answer.timers) == ((), (), ())


@pytest.mark.parametrize(("text", "why"), [
    ("{}x", "not valid JSON"),
    ('{"messages": "hi"}', "messages must be a list"),
    ('{"messages": [{"body": "x", "loud": true}]}', "messages[0] has unknown keys: loud"),
    ('{"messages": [{"body": "x", "urgent": 1}]}', "urgent must be true or false"),
    ('{"approvals": [{"id": "", "expires_in": "1h", "action": "x"}]}', "approvals[0].id"),
    ('{"approvals": [{"id": "r", "expires_in": "1h", "action": "x", "who": 1}]}',
     "approvals[0] has unknown keys: who"),
    ('{"approvals": [{"id": "r\\u0000", "expires_in": "1h", "action": "x"}]}', "NUL"),
    ('{"messages": ["a\\u0000b"]}', "messages[0] contains a NUL character"),
    ('{"approvals": [{"id": "r", "expires_in": "1h", "action": "\\u0000"}]}',
     "approvals[0].action contains a NUL character"),
    ('{"approvals": [{"id": "r", "expires_in": -5, "action": "x"}]}', "expires_in"),
    ('{"timers": [{"name": "t", "in": "1h", "payload": [1]}]}', "must be a JSON object"),
    ('{"timers": [{"name": "t", "in": "1h", "payload": {"late_by": 1}}]}', "late_by"),
    ('{"timers": [{"name": "' + "n" * 201 + '", "in": "1h"}]}', "timers[0]: a timer name"),
    ('{"timers": [{"name": "t", "in": "1h", "every": "1d"}]}', "unknown keys: every"),
    ('{"messages": [], "messages": []}', "duplicate key"),
])
def test_a_malformed_answer_is_refused_whole(text, why):
    with pytest.raises(BadInput) as caught:
        parse(text)
    assert why in str(caught.value)


def spec(name: str, due: int, every: int | None = None, **extra: object) -> TimerSpec:
    return TimerSpec(name=name, due=due, every=every, **extra)  # type: ignore[arg-type]


def test_re_adding_and_replacing_timers(store):
    assert store.add_timer(spec("d", T0, 3600), T0) == "added"
    assert store.tick(T0) == 1
    # The due time moved on; the same schedule re-added is unchanged, not re-armed.
    assert store.add_timer(spec("d", T0 + 50, 3600), T0 + 50) == "unchanged"
    assert timer(store, "d").due == T0 + 3600
    # --replace names the old due time: that is a change, and it re-arms it.
    assert store.add_timer(spec("d", T0, 3600), T0, replace=True) == "replaced"
    assert timer(store, "d").due == T0
    assert store.add_timer(spec("d", T0, 3600), T0, replace=True) == "unchanged"
    with pytest.raises(NotAsAsked):
        store.add_timer(spec("d", T0, 60), T0)


@pytest.mark.sqlite_file  # a trigger in the file makes the pass crash half-way
def test_a_pass_stores_its_events_and_advances_its_timers_in_one_transaction(store):
    """Rule 5: a crash between the event and the timer's advance leaves neither."""
    conn = store.engine.conn
    store.add_timer(spec("daily", T0, 86400), T0)
    store.add_timer(spec("once", T0), T0)
    conn.execute("""CREATE TEMP TRIGGER crash_on_advance BEFORE UPDATE ON timers
                    BEGIN SELECT RAISE(ABORT, 'crash before the timer moved on'); END""")
    with pytest.raises(DatabaseError, match="crash before the timer moved on"):
        store.tick(T0 + 5)
    assert store.timer_events("daily") == [] and store.timer_events("once") == []
    assert [(t.name, t.due, t.done) for t in store.timers(include_done=True)] == [
        ("daily", T0, False), ("once", T0, False)]
    conn.execute("DROP TRIGGER crash_on_advance")
    assert store.tick(T0 + 5) == 2
    assert [e.source_id for e in store.timer_events("daily")] == [f"daily@{T0}"]
    assert timer(store, "daily").due == T0 + 86400


def test_a_fired_one_off_is_spent(store):
    assert store.add_timer(spec("once", T0), T0) == "added"
    assert store.tick(T0) == 1
    assert store.add_timer(spec("once", T0), T0) == "unchanged"
    assert store.add_timer(spec("once", T0 + 60), T0) == "added"  # no --replace needed
    assert store.tick(T0 + 60) == 1


def test_a_follow_up_re_arms_one_offs_only(store):
    follow = FollowUp("t", 60)
    assert store.add_timer(follow.to_timer(T0), T0, replace=True) == "added"
    assert store.add_timer(follow.to_timer(T0 + 5), T0 + 5, replace=True) == "replaced"
    assert store.add_timer(spec("daily", T0, 86400), T0) == "added"
    with pytest.raises(BadInput, match="recurring schedule"):
        store.add_timer(FollowUp("daily", 60).to_timer(T0), T0, replace=True)
    assert store.request_approval("r1", T0, 3600, "refund")
    with pytest.raises(BadInput, match="kept for approvals' expiries"):
        store.add_timer(FollowUp("expire:r1", 60).to_timer(T0), T0, replace=True)


def test_an_answer_never_crashes_on_a_foreign_event_under_its_key(store):
    assert store.request_approval("r1", T0, 3600, "refund")
    plant(store, "approval", "r1", '{"note": "typed by hand"}', T0)
    assert store.answer_approval("r1", "yes", T0 + 1) == "unknown"


def test_the_expiry_goes_once_it_fired(store):
    assert store.request_approval("r1", T0, 60, "refund")
    with pytest.raises(NotAsAsked):
        store.remove_timer("expire:r1", T0)
    assert store.tick(T0 + 60) == 1
    assert store.remove_timer("expire:r1", T0 + 61)
    assert not store.remove_timer("expire:r1", T0 + 61)
