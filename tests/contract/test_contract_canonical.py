"""Store contract: payloads are the same document when RFC 8785 (JCS) says so, and a
payload stored or remembered in the spelling of agentbox 0.2 is still recognised."""

from __future__ import annotations

import pytest

from agentbox import upkeep
from agentbox.errors import BadInput
from agentbox.jsonutil import legacy_canonical
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from agentbox.rules.retention import digest
from support.clock import T0, TTL


@pytest.mark.parametrize(("first", "again"), [('{"n": 1}', '{"n": 1.0}'),
                                              ('{"n": 1e2}', '{"n": 100}'),
                                              ('{"n": [0.5, -0.0]}', '{"n": [5e-1, 0]}'),
                                              ('{"a": 1, "b": true}', '{"b":true,"a":1.00}')])
def test_numbers_jcs_spells_alike_are_a_duplicate_not_a_conflict(
        backend: Store, first: str, again: str) -> None:
    stored = backend.ingest("hook", "k", first, T0)
    assert stored.outcome == "stored"
    assert backend.ingest("hook", "k", again, T0).outcome == "duplicate"
    [many] = backend.ingest_many([("hook", "k", again)], T0)
    assert many.outcome == "duplicate"
    assert backend.ingest("hook", "k", '{"n": 2}', T0).outcome == "conflict"


def test_a_float_is_stored_as_jcs_writes_it(backend: Store) -> None:
    backend.ingest("hook", "k", '{"big": 1e300, "n": 1.0, "tiny": 1e-7}', T0)
    event = backend.find("hook", "k")
    assert event is not None and event.payload == '{"big":1e+300,"n":1,"tiny":1e-7}'


@pytest.mark.parametrize("payload", [
    '{"q": "say \\"hi\\"", "path": "C:\\\\x", "nl": "a\\nb\\u0001", "del": "\x7f"}',
    '{"é": "ü", "sep": "\u2028\u2029", "smile": "\U0001f600", "esc": "\\ud83d\\ude00"}',
    '{"url": "http://h:80/a", "n": [1.5, 1e2, -0, 123456789012345], "t": true}',
    '{"url": "http://h:80/a", "é": ["ü€", null, -0, 123456789012345], "t": {}}',  # plain
])
def test_a_line_of_a_bulk_ingest_is_stored_as_a_single_ingest_stores_it(
        backend: Store, payload: str) -> None:
    from agentbox.jsonl import ingest_stream

    backend.ingest("hook", "one", payload, T0)
    line = f'{{"source": "hook", "source_id": "bulk", "payload": {payload}}}\n'
    report = ingest_stream(backend, [line.encode()], T0, 10_000)
    assert [e.outcome for e in report.entries] == ["stored"]
    one, bulk = backend.find("hook", "one"), backend.find("hook", "bulk")
    assert one is not None and bulk is not None and bulk.payload == one.payload


def test_an_integer_beyond_what_json_numbers_carry_is_bad_input(backend: Store) -> None:
    assert backend.ingest("hook", "ok", '{"n": 9007199254740991}', T0).outcome == "stored"
    with pytest.raises(BadInput, match="send it as a string"):
        backend.ingest("hook", "k", '{"n": 9007199254740993}', T0)
    assert backend.find("hook", "k") is None


_NAMED_BY = {"events": "source_id", "timers": "name"}  # the column a test names a row by


def _as_stored_by_0_2(store: Store, key: str, old: str, table: str = "events") -> None:
    """The payload of the ``table`` row named ``key`` as agentbox 0.2 spelt it, in an
    inbox whose walk to JCS has not begun."""
    with store._write() as tx:
        tx.run(f"UPDATE {table} SET payload = :old WHERE inbox_id = :box "
               f"AND {_NAMED_BY[table]} = :k", old=old, k=key)
        tx.run("UPDATE inboxes SET canonical_from = 0 WHERE id = :box")


def test_an_old_inbox_s_duplicate_is_still_recognised_and_its_rows_rewritten(
        backend: Store) -> None:
    backend.ingest("hook", "k", '{"n": 1.0}', T0)
    backend.ingest("hook", "plain", '{"s": "a.b"}', T0)
    _as_stored_by_0_2(backend, "k", legacy_canonical({"n": 1.0}))  # '{"n":1.0}'
    assert backend.ingest("hook", "k", '{"n": 1.0}', T0).outcome == "duplicate"
    upkeep.prune(backend, T0, Policy(lease_ttl=TTL), sleep=lambda _: None)
    event = backend.find("hook", "k")
    assert event is not None and event.payload == '{"n":1}'
    assert backend.ingest("hook", "k", '{"n": 1}', T0).outcome == "duplicate"
    assert backend.canonicalise_step() is None  # done: the walk is not made again


def test_the_walk_counts_only_the_payloads_it_rewrote_and_rewrites_timers_too(
        backend: Store) -> None:
    """A step says how many payloads it changed: those already in JCS are left and not
    counted. The first step rewrites every timer's payload in JCS as well."""
    from agentbox.rules.timers import TimerSpec

    for key in ("a", "old", "b"):
        backend.ingest("hook", key, '{"n": 1.0}', T0)
    for name in ("digest", "plain"):
        backend.add_timer(TimerSpec(name=name, due=T0 + 60, every=None, payload='{"n":1}'), T0)
    _as_stored_by_0_2(backend, "old", legacy_canonical({"n": 1.0}))
    _as_stored_by_0_2(backend, "digest", legacy_canonical({"n": 1.0, "a": [2.0]}), "timers")
    assert backend.canonicalise_step() == 1
    assert [e.payload for e in backend.events()] == ['{"n":1}'] * 3
    assert [(t.name, t.payload) for t in backend.timers()] == [
        ("digest", '{"a":[2],"n":1}'), ("plain", '{"n":1}')]
    assert backend.canonicalise_step() is None


def test_the_walk_goes_a_bounded_step_at_a_time_each_row_once(backend: Store) -> None:
    """Each step rewrites the next ``limit`` events from where the last one stopped, none
    twice and none skipped; the step that finds fewer than ``limit`` is the last."""
    keys = [f"k{n}" for n in range(7)]
    for key in keys:
        backend.ingest("hook", key, '{"n": 1.0}', T0)
    for key in keys:
        _as_stored_by_0_2(backend, key, legacy_canonical({"n": 1.0}))
    assert [backend.canonicalise_step(3) for _ in range(4)] == [3, 3, 1, None]
    assert [e.payload for e in backend.events()] == ['{"n":1}'] * 7


def test_a_key_pruned_by_0_2_is_still_a_duplicate_in_its_old_spelling(backend: Store) -> None:
    old = legacy_canonical({"n": 1.0})
    with backend._write() as tx:
        tx.run("""INSERT INTO pruned_keys (inbox_id, source, source_id, digest, event_id, until)
                  VALUES (:box, 'hook', 'gone', :digest, 7, :until)""",
               digest=digest(old), until=T0 + 3600)
    again = backend.ingest("hook", "gone", '{"n": 1.0}', T0)
    assert (again.outcome, again.id) == ("duplicate", 7)
    assert backend.ingest("hook", "gone", '{"n": 2}', T0).outcome == "conflict"
