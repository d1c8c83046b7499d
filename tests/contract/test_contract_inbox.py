"""Store contract: ingest, events, history, dead letters, replay and status."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.clock import T0, TTL
from support.store import plant, run, store_snapshot


def test_location_and_instance_identify_a_store(backend: Store, other_backend: Store) -> None:
    assert isinstance(backend.location, str) and backend.location
    assert backend.instance_id() == backend.instance_id()
    assert backend.instance_id() != other_backend.instance_id()


def test_an_empty_store_reports_zero_everywhere(backend: Store) -> None:
    status = backend.status()
    assert status.events == {"pending": 0, "running": 0, "done": 0, "dead": 0}
    assert status.outbox == {"held": 0, "sending": 0, "sent": 0, "uncertain": 0}
    assert (status.lease, status.next_timer) == (None, None)
    assert backend.lease() is None
    assert backend.dead() == [] and backend.timers() == [] and backend.outbox() == []
    assert backend.event(1) is None and backend.find("s", "1") is None
    assert backend.story(1) == []


def test_ingest_stores_once_and_the_first_payload_stands(backend: Store) -> None:
    stored = backend.ingest("github", "d-1", '{"pr":12}', T0)
    assert stored.outcome == "stored"
    assert (stored.source, stored.source_id) == ("github", "d-1")
    before = store_snapshot(backend, [stored.id])
    duplicate = backend.ingest("github", "d-1", '{"pr":12}', T0 + 1)
    assert (duplicate.outcome, duplicate.id) == ("duplicate", stored.id)
    assert store_snapshot(backend, [stored.id]) == before
    conflict = backend.ingest("github", "d-1", '{"pr":99}', T0 + 2)
    assert (conflict.outcome, conflict.id) == ("conflict", stored.id)
    event = backend.find("github", "d-1")
    assert event is not None and event == backend.event(stored.id)
    assert (event.payload, event.status, event.attempts) == ('{"pr":12}', "pending", 0)
    assert backend.status().events["pending"] == 1
    assert [e.action for e in backend.story(stored.id)] == ["stored", "conflict"]


def test_ingest_many_answers_item_by_item(backend: Store) -> None:
    results = backend.ingest_many([("s", "1", "{}"), ("s", "2", "{}"), ("s", "1", "{}"),
                                   ("s", "2", '{"x":1}')], T0)
    assert [r.outcome for r in results] == ["stored", "stored", "duplicate", "conflict"]
    assert results[0].id == results[2].id and results[1].id == results[3].id
    assert results[0].id != results[1].id
    assert backend.ingest_many([], T0) == []


def test_a_batch_sent_again_is_judged_key_by_key_across_every_slice_it_is_read_in(
        backend: Store) -> None:
    """A redelivered batch longer than a read of standing keys holds (STANDING_SLICE):
    each key is a duplicate of its own event, a changed payload anywhere a conflict."""
    from agentbox.ledger.inbox import STANDING_SLICE

    count = 2 * STANDING_SLICE + 3
    first = backend.ingest_many([("s", str(n), f'{{"n":{n}}}') for n in range(count)], T0)
    assert [(r.outcome, r.source, r.source_id) for r in first] == [
        ("stored", "s", str(n)) for n in range(count)]
    again = [("s", str(n), f'{{"n":{n}}}') for n in range(count)]
    changed = STANDING_SLICE + 1
    again[changed] = ("s", str(changed), '{"n":"changed"}')
    results = backend.ingest_many(again, T0 + 1)
    assert [r.id for r in results] == [r.id for r in first]
    assert [r.outcome for r in results] == ["duplicate"] * changed + ["conflict"] + [
        "duplicate"] * (count - changed - 1)


def test_a_batch_sent_again_is_answered_by_reads_with_no_key_stored_one_by_one(
        backend: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every standing key of a batch, the first of each slice included, is found by the
    batch's reads: none is handed to the engine again one by one (which would give the
    same answers, a statement per key later)."""
    from agentbox.ledger.inbox import STANDING_SLICE

    count = STANDING_SLICE + 2
    items = [("s", str(n), "{}") for n in range(count)]
    backend.ingest_many(items, T0)
    one_by_one: list[tuple[str, str]] = []
    store_event = backend.engine.store_event

    def counted(tx: object, box: int, source: str, source_id: str, *rest: object) -> object:
        one_by_one.append((source, source_id))
        return store_event(tx, box, source, source_id, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(backend.engine, "store_event", counted)
    repeated = [*items, ("s", "new", "{}"), ("s", "new", "{}"), ("s", "0", '{"x":1}')]
    results = backend.ingest_many(repeated, T0 + 1)
    assert [r.outcome for r in results] == ["duplicate"] * count + [
        "stored", "duplicate", "conflict"]
    assert one_by_one == []


def test_ingest_many_judges_keys_stored_before_and_inside_the_batch(backend: Store) -> None:
    first = backend.ingest("s'; DROP TABLE events; --", "é \"1\"", '{"v":1}', T0)
    results = backend.ingest_many([
        ("new", "ü-1", '{"a":"é"}'), ("s'; DROP TABLE events; --", "é \"1\"", '{"v":1}'),
        ("s'; DROP TABLE events; --", "é \"1\"", '{"v":2}'), ("new", "ü-2", "{}"),
        ("new", "ü-1", '{"a":"e"}')], T0 + 1)
    assert [r.outcome for r in results] == ["stored", "duplicate", "conflict", "stored",
                                            "conflict"]
    assert results[1].id == results[2].id == first.id
    assert first.id < results[0].id < results[3].id == results[4].id + 1
    assert (results[0].source, results[0].source_id) == ("new", "ü-1")
    stored = backend.find("new", "ü-1")
    assert stored is not None and stored.payload == '{"a":"é"}'
    assert [e.action for e in backend.story(first.id)] == ["stored", "conflict"]
    assert [e.action for e in backend.story(results[0].id)] == ["stored", "conflict"]
    assert backend.status().events["pending"] == 3


def test_bad_keys_are_refused_before_anything_is_stored(backend: Store) -> None:
    for source, source_id, why in (
            ("", "1", "source must be a non-empty string"),
            ("s", "", "source_id must be a non-empty string"),
            ("s" * 513, "1", "source is longer than 512 characters"),
            ("s", "i" * 513, "source_id is longer than 512 characters"),
            ("s\ud800", "1", "source is not valid UTF-8"),
            ("s", "\udfff", "source_id is not valid UTF-8"),
            ("s", "a\x00", "source_id contains a NUL character")):
        with pytest.raises(BadInput) as refused:
            backend.ingest(source, source_id, "{}", T0)
        assert str(refused.value) == why
        with pytest.raises(BadInput):
            backend.ingest_many([("s", "ok", "{}"), (source, source_id, "{}")], T0)
    assert backend.status().events["pending"] == 0


def test_a_key_may_be_512_characters_on_each_side(backend: Store) -> None:
    longest = ("s" * 512, "i" * 512)
    stored = backend.ingest(*longest, "{}", T0)
    assert (stored.outcome, stored.source, stored.source_id) == ("stored", *longest)
    assert backend.find(*longest) == backend.event(stored.id)
    assert backend.ingest_many([(*longest, "{}")], T0)[0].outcome == "duplicate"


def test_a_refused_delivery_still_names_its_key(backend: Store) -> None:
    backend.ingest("github", "d-1", '{"pr":12}', T0)
    backend.ingest("github", "d-2", '{"pr":13}', T0)
    again = [backend.ingest("github", "d-1", '{"pr":12}', T0 + 1),
             backend.ingest("github", "d-1", '{"pr":99}', T0 + 1),
             *backend.ingest_many([("github", "d-2", '{"pr":13}'),
                                   ("github", "d-2", '{"pr":0}')], T0 + 1)]
    assert [(r.outcome, r.source, r.source_id) for r in again] == [
        ("duplicate", "github", "d-1"), ("conflict", "github", "d-1"),
        ("duplicate", "github", "d-2"), ("conflict", "github", "d-2")]


def test_dead_lists_buried_events_with_their_error_and_replay_revives_them(
        backend: Store) -> None:
    ids = [backend.ingest("s", str(n), f'{{"n":{n}}}', T0).id for n in range(3)]
    one_try = Policy(lease_ttl=TTL, max_attempts=1)
    generation = backend.acquire("W", T0, TTL)
    assert generation is not None
    batch = backend.claim("W", generation, T0, one_try)
    assert batch is not None and [e.id for e in batch] == ids
    assert backend.fail("W", generation, T0, ids[:2], "handler exited 1", one_try)
    assert backend.finish("W", generation, T0, ids[2:])
    assert backend.release("W", generation, T0)
    dead = backend.dead()
    assert [(e.id, e.status, e.attempts, e.error) for e in dead] == [
        (i, "dead", 1, "handler exited 1") for i in ids[:2]]
    assert [e.id for e in backend.dead(limit=1)] == ids[:1]
    assert backend.status().events == {"pending": 0, "running": 0, "done": 1, "dead": 2}

    assert backend.replay([ids[0], ids[2], 999], T0 + 10) == [ids[0]]  # only the dead one
    revived = backend.event(ids[0])
    assert revived is not None
    assert (revived.status, revived.attempts, revived.error, revived.source_id) == (
        "pending", 0, None, "0")
    assert backend.story(ids[0])[-1].action == "replayed"
    assert backend.replay(None, T0 + 11) == [ids[1]]
    assert backend.dead() == []
    assert backend.status().events == {"pending": 2, "running": 0, "done": 1, "dead": 0}
    _, batch = run(backend, "W2", T0 + 12)
    assert [e.id for e in batch] == ids[:2]  # replayed: fresh again, batched together


def test_story_names_every_transition_in_order(backend: Store) -> None:
    event_id = backend.ingest("s", "1", "{}", T0).id
    generation = backend.acquire("W", T0, TTL)
    assert generation is not None
    backend.claim("W", generation, T0, Policy(lease_ttl=TTL, max_attempts=2))
    backend.fail("W", generation, T0 + 1, [event_id], "boom",
                 Policy(lease_ttl=TTL, max_attempts=2))
    backend.claim("W", generation, T0 + 2, Policy(lease_ttl=TTL, max_attempts=2))
    backend.finish("W", generation, T0 + 3, [event_id])
    story = backend.story(event_id)
    assert [(e.action, e.at, e.generation) for e in story] == [
        ("stored", T0, None), ("claimed", T0, 1), ("failed", T0 + 1, 1),
        ("claimed", T0 + 2, 1), ("finished", T0 + 3, 1)]
    assert all(e.subject == "event" and e.subject_id == str(event_id) for e in story)
    assert story[2].detail == "boom"


def test_a_payload_over_the_bound_is_refused_one_by_one_or_many(backend: Store) -> None:
    big = '{"text": "' + "x" * 40 + '"}'
    with pytest.raises(BadInput):
        backend.ingest("hook", "big", big, T0, max_payload=32)
    with pytest.raises(BadInput):
        backend.ingest_many([("hook", "small", "{}"), ("hook", "big", big)], T0, max_payload=32)
    assert backend.events() == []
    assert [r.outcome for r in backend.ingest_many([("hook", "big", big)], T0)] == ["stored"]


def test_an_event_stored_inside_a_transaction_is_judged_as_an_ingest_is(
        backend: Store) -> None:
    """What a timer, an approval's outcome and a batch's remembered keys store through
    (``plant`` here): the key is named in the answer, the same payload again is a
    duplicate, another one a conflict written into the story of the event that stands."""
    from agentbox.rules.keys import conflict_detail

    stored = plant(backend, "timer", "digest@1", '{"n":1}', T0)
    assert (stored.outcome, stored.source, stored.source_id) == ("stored", "timer",
                                                                 "digest@1")
    again = plant(backend, "timer", "digest@1", '{"n":1}', T0 + 1)
    assert (again.outcome, again.id, again.source, again.source_id) == (
        "duplicate", stored.id, "timer", "digest@1")
    assert [e.action for e in backend.story(stored.id)] == ["stored"]
    other = plant(backend, "timer", "digest@1", '{"n":2}', T0 + 2)
    assert (other.outcome, other.id) == ("conflict", stored.id)
    assert [(e.at, e.action, e.detail) for e in backend.story(stored.id)][1:] == [
        (T0 + 2, "conflict", conflict_detail('{"n":2}'))]
    event = backend.event(stored.id)
    assert event is not None and event.payload == '{"n":1}'  # the first stands
