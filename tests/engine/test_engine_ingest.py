"""Rule 1: ingest once. Duplicates change nothing; a conflict is refused; the first stands."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.jsonutil import parse_payload
from agentbox.ledger.store import Store
from support.clock import T0
from support.store import MakeStepWorker, actions, every_row


def test_first_delivery_is_stored_pending(store: Store) -> None:
    result = store.ingest("github", "delivery-7f3a", '{"pr":12}', T0)
    assert result.outcome == "stored"
    event = store.event(result.id)
    assert event is not None
    assert (event.source, event.source_id, event.payload) == ("github", "delivery-7f3a",
                                                              '{"pr":12}')
    assert (event.status, event.attempts, event.claim_gen, event.error) == ("pending", 0,
                                                                            None, None)
    assert (event.created_at, event.updated_at) == (T0, T0)
    assert actions(store, result.id) == ["stored"]


def test_a_duplicate_is_success_and_changes_nothing(store: Store) -> None:
    first = store.ingest("github", "delivery-7f3a", '{"pr":12}', T0)
    before = every_row(store)
    again = store.ingest("github", "delivery-7f3a", '{"pr":12}', T0 + 50)
    assert (again.outcome, again.id) == ("duplicate", first.id)
    assert every_row(store) == before


def test_a_conflict_is_refused_and_the_first_payload_stands(store: Store) -> None:
    first = store.ingest("github", "d-1", '{"pr":12}', T0)
    before = store.event(first.id)
    result = store.ingest("github", "d-1", '{"pr":13}', T0 + 5)
    assert (result.outcome, result.id) == ("conflict", first.id)
    assert store.event(first.id) == before  # payload, state and times untouched
    assert store.status().events["pending"] == 1
    story = store.story(first.id)
    assert [e.action for e in story] == ["stored", "conflict"]
    assert story[1].at == T0 + 5 and story[1].detail and "different payload" in story[1].detail


def test_payloads_are_compared_in_canonical_form(store: Store) -> None:
    """Reordered keys, whitespace and escapes are the same payload (the path ingest takes)."""
    first = parse_payload('{"b": 1, "a": {"y": [1, 2], "x": "\\u00e9"}}')
    same = parse_payload('{"a":{"x":"é","y":[1,2]},\n "b":1}')
    other = parse_payload('{"a":{"x":"é","y":[2,1]},"b":1}')
    assert store.ingest("hook", "1", first, T0).outcome == "stored"
    assert store.ingest("hook", "1", same, T0).outcome == "duplicate"
    assert store.ingest("hook", "1", other, T0).outcome == "conflict"


def test_the_key_is_source_and_source_id_together(store: Store) -> None:
    assert store.ingest("github", "42", "{}", T0).outcome == "stored"
    assert store.ingest("stripe", "42", "{}", T0).outcome == "stored"
    assert store.ingest("github", "43", "{}", T0).outcome == "stored"
    assert store.status().events["pending"] == 3


def test_a_repeat_of_a_finished_event_does_not_run_it_again(
        store: Store, worker: MakeStepWorker) -> None:
    store.ingest("chat", "m1", '{"text":"hi"}', T0)
    worker("A").run(T0)
    assert store.ingest("chat", "m1", '{"text":"hi"}', T0 + 1).outcome == "duplicate"
    assert store.status().events == {"pending": 0, "running": 0, "done": 1, "dead": 0}


def test_ingest_many_reports_each_item_in_order(store: Store) -> None:
    store.ingest("s", "old", '{"v":1}', T0)
    results = store.ingest_many([("s", "a", '{"v":1}'), ("s", "old", '{"v":1}'),
                                 ("s", "old", '{"v":2}'), ("s", "a", '{"v":1}'),
                                 ("s", "a", '{"v":9}'), ("s", "b", "{}")], T0)
    assert [r.outcome for r in results] == ["stored", "duplicate", "conflict", "duplicate",
                                            "conflict", "stored"]
    assert results[0].id == results[3].id == results[4].id
    a = store.find("s", "a")
    assert a is not None and a.payload == '{"v":1}'
    assert store.status().events["pending"] == 3


@pytest.mark.parametrize(("source", "source_id"), [
    ("", "1"), ("s", ""), ("s", "a\x00b"), ("s" * 513, "1"), ("s", "x" * 513), ("s", "\ud800"),
])
def test_keys_that_could_not_be_looked_up_are_refused(
        store: Store, source: str, source_id: str) -> None:
    before = every_row(store)
    with pytest.raises(BadInput):
        store.ingest(source, source_id, "{}", T0)
    with pytest.raises(BadInput):
        store.ingest_many([("ok", "1", "{}"), (source, source_id, "{}")], T0)
    assert every_row(store) == before


@pytest.mark.sqlite_file
def test_a_redelivery_is_answered_without_the_write_lock(store: Store, inbox_path) -> None:
    """While another connection holds the file's write lock, a duplicate is still
    answered (by a read); a conflict, which writes into the story, and a new key wait
    for the lock, here past a short busy timeout."""
    import sqlite3

    from agentbox.errors import Busy

    first = store.ingest("github", "d-1", '{"pr":12}', T0)
    store.engine.conn.busy_timeout_s = 0.05  # type: ignore[attr-defined]
    other = sqlite3.connect(inbox_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        for spelling in ('{"pr":12}', '{"pr": 12}'):  # the text stored, and another
            again = store.ingest("github", "d-1", spelling, T0 + 5)
            assert (again.outcome, again.id) == ("duplicate", first.id)
        for key, payload in (("d-1", '{"pr":13}'), ("d-2", "{}")):
            with pytest.raises(Busy):
                store.ingest("github", key, payload, T0 + 5)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.ingest("github", "d-1", '{"pr":13}', T0 + 6).outcome == "conflict"
    assert [e.action for e in store.story(first.id)] == ["stored", "conflict"]


@pytest.mark.sqlite_file
def test_the_very_text_stored_is_answered_without_a_parse_up_to_the_bound(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the engine glances (SQLite), a redelivery of the text stored is judged by
    the read alone, a payload of exactly the bound included: its characters (52) are
    more than a quarter of the bound, so only its bytes (92) can say it fits."""
    import agentbox.ledger.inbox as inbox

    body = '{"text":"' + "é" * 40 + '"}'
    first = store.ingest("s", "big", body, T0)

    def parsed(*_: object) -> str:
        raise AssertionError("the redelivery was parsed")

    monkeypatch.setattr(inbox, "payload_text", parsed)
    assert store.ingest("s", "big", body, T0, max_payload=len(body.encode())).id == first.id


def test_a_redelivery_is_held_to_the_size_bound_in_force(store: Store) -> None:
    """The very text stored is a duplicate without a parse, but not past a bound
    lowered since it was stored: that is bad input, as for any other payload."""
    body = '{"text":"' + "é" * 40 + '"}'
    first = store.ingest("s", "big", body, T0)
    assert store.ingest("s", "big", body, T0, max_payload=len(body.encode())).id == first.id
    with pytest.raises(BadInput, match="over the"):
        store.ingest("s", "big", body, T0, max_payload=len(body.encode()) - 1)
    with pytest.raises(BadInput):
        store.ingest("s", "big", '{"text":', T0)
