"""Store contract: the recorded traffic read back for an export (arrivals, approval
answers, sends, each in a window), and a recorded arrival delivered again into a
rehearsal's inbox."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.timers import SOURCE as TIMER
from support.clock import T0
from support.store import run, say

H = 3_600
MAX = 1_000  # the rehearsal's max_payload in these tests


def _sent(store: Store, now: int) -> None:
    """Claim the next dispatch at ``now`` and settle it sent a second later."""
    claimed = store.claim_dispatch(now, "at-least-once", 0, 60)
    assert not hasattr(claimed, "held")
    assert store.settle_dispatch(claimed.key, "sent", now + 1,  # type: ignore[union-attr]
                                 attempt=1)


def test_each_read_holds_its_window_since_inclusive_until_exclusive(backend: Store) -> None:
    """``since`` is the first second in the window and ``until`` the first one after it,
    for arrivals (by arrival), answers (by answer) and sends (by claim) alike."""
    backend.ingest("chat", "m", "{}", T0)
    backend.request_approval("a1", T0, H, "refund")
    assert backend.answer_approval("a1", "yes", T0 + 100) == "yes"
    say(backend, T0 + 1, "hello")
    _sent(backend, T0 + 200)
    assert [e.source_id for e in backend.arrivals(T0, T0 + 1)] == ["m"]
    assert backend.arrivals(T0 + 1) == [] and backend.arrivals(until=T0) == []
    assert [a.approval for a in backend.answers(T0 + 100, T0 + 101)] == ["a1"]
    assert backend.answers(T0 + 101) == []
    assert backend.answers(until=T0 + 100) == []
    assert [s.at for s in backend.sends(T0 + 200, T0 + 201)] == [T0 + 200]
    assert backend.sends(T0 + 201) == []
    assert backend.sends(until=T0 + 200) == []


def test_a_send_is_read_back_with_its_urgency(backend: Store) -> None:
    """A dispatch's urgency is part of what was said: an urgent one reads back urgent,
    a plain one not."""
    say(backend, T0, "fire!", urgent=True)
    _sent(backend, T0 + 10)
    say(backend, T0 + 20, "calm")
    _sent(backend, T0 + 30)
    assert [(s.body, s.urgent) for s in backend.sends()] == [("fire!", True), ("calm", False)]


def test_an_arrival_from_outside_is_delivered_as_ingest_delivers_it(backend: Store) -> None:
    """A recorded delivery goes through ingest's rules: stored canonical at ``now``, a
    duplicate the second time, bounded by ``max_payload``, its source not agentbox's."""
    first = backend.arrive("chat", "m1", '{"b": 1, "a": 2}', T0, MAX)
    assert (first.outcome, first.source, first.source_id) == ("stored", "chat", "m1")
    event = backend.event(first.id)
    assert event is not None
    assert (event.source, event.source_id, event.payload, event.created_at) == (
        "chat", "m1", '{"a":2,"b":1}', T0)
    again = backend.arrive("chat", "m1", '{"a": 2, "b": 1}', T0 + 1, MAX)
    assert (again.outcome, again.id) == ("duplicate", first.id)
    with pytest.raises(BadInput):
        backend.arrive("chat", "big", '{"s": "%s"}' % ("x" * MAX), T0, MAX)
    assert backend.find("chat", "big") is None
    with pytest.raises(BadInput):
        backend.arrive("approval", "a1", "{}", T0, MAX)  # a source agentbox writes itself


def test_a_timer_firing_is_stored_as_the_scheduler_stores_it(backend: Store) -> None:
    """A recorded firing keeps agentbox's own source; its key is still checked; the same
    firing again is one event, and another payload under its key is refused without a
    conflict in the story (the rehearsed handler's own timer may fire it too)."""
    fired = backend.arrive(TIMER, "digest@1000000", '{"n":1}', T0, MAX)
    assert (fired.outcome, fired.source, fired.source_id) == ("stored", TIMER, "digest@1000000")
    event = backend.find(TIMER, "digest@1000000")
    assert event is not None and event.id == fired.id
    assert (event.payload, event.created_at, event.status) == ('{"n":1}', T0, "pending")
    again = backend.arrive(TIMER, "digest@1000000", '{"n":1}', T0 + 1, MAX)
    assert (again.outcome, again.id) == ("duplicate", fired.id)
    other = backend.arrive(TIMER, "digest@1000000", '{"n":2}', T0 + 2, MAX)
    assert (other.outcome, other.id) == ("conflict", fired.id)
    assert [e.action for e in backend.story(fired.id)] == ["stored"]
    with pytest.raises(BadInput):
        backend.arrive(TIMER, "", "{}", T0, MAX)
    assert [e.source_id for e in backend.arrivals()] == ["digest@1000000"]


def test_finished_twice_names_each_event_whose_story_finished_more_than_once(
        backend: Store) -> None:
    """The rehearsal's check that a fenced finish ran once: nothing in a sound inbox;
    (event id, times) for an event whose story holds two ``finished`` lines or more."""
    from agentbox.ledger import history

    backend.ingest("chat", "a", "{}", T0)
    _, [once] = run(backend, "A", T0)
    assert "finished" in [e.action for e in backend.story(once.id)]
    assert backend.finished_twice() == []
    twice = backend.ingest("chat", "b", "{}", T0 + 1).id
    thrice = backend.ingest("chat", "c", "{}", T0 + 1).id
    with backend._write() as tx:  # as no fenced finish may: the story a bug would leave
        for event_id, times in ((thrice, 3), (twice, 2)):
            for _ in range(times):
                history.record(tx, T0 + 2, "event", event_id, "finished", 1)
    assert backend.finished_twice() == [(twice, 2), (thrice, 3)]
