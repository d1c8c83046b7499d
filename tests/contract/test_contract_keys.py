"""Store contract: the keys an inbox hands out — its instance id, the key prefix of things
made now, and each event's idempotency key, before and after a restore.

A restore replaces an SQLite inbox file, but a backup of either backend restores: so the
restored inbox here is a file, made from this backend's backup.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentbox.ledger.store import Store
from agentbox.location import open_store
from agentbox.rules.outbox import Dispatch
from agentbox.upkeep import RestoreReport, backup, restore
from support.clock import T0, TTL
from support.store import POLICY, say


@contextmanager
def restored(store: Store, folder: Path, now: int) -> Iterator[tuple[Store, RestoreReport]]:
    """``store`` backed up and restored into a new inbox file: the restored store, and
    what the restore said."""
    folder.mkdir()
    copy = folder / "backup.sqlite3"
    backup(store, str(copy))
    report = restore(str(folder / "inbox.sqlite3"), str(copy), now)
    again = open_store(report.db, "alice", create=False)
    try:
        yield again, report
    finally:
        again.close()


def test_an_inbox_s_keys_start_with_its_instance_id(backend: Store, twin: Store) -> None:
    instance = backend.instance_id()  # made by the first call, even before a write
    assert re.fullmatch(r"[0-9a-f]{12}", instance)  # six random bytes: short, in every key
    assert twin.instance_id() == instance  # the inbox's, not the connection's
    assert backend.key_prefix() == instance  # no restore yet
    ids = [backend.ingest("chat", f"m{n}", "{}", T0).id for n in range(3)]
    assert backend.event_keys(ids) == {i: f"{instance}-event-{i}" for i in ids}
    assert backend.event_keys([ids[-1]]) == {ids[-1]: f"{instance}-event-{ids[-1]}"}
    assert backend.event_keys([]) == {}
    say(backend, T0, "hello")
    sent = backend.claim_dispatch(T0, "at-least-once", 0, 60)
    assert isinstance(sent, Dispatch) and sent.key == f"{instance}-1"


def test_after_a_restore_old_events_keep_their_keys_and_new_ones_take_the_epoch_s(
        backend: Store, tmp_path: Path) -> None:
    instance = backend.instance_id()
    first = backend.ingest("chat", "a", "{}", T0).id
    kept = backend.event_keys([first])
    with restored(backend, tmp_path / "one", T0 + 5) as (store, report):
        assert store.instance_id() == instance  # a restore keeps the inbox's id
        prefix = store.key_prefix()
        assert prefix == report.key_prefix != instance and prefix.startswith(f"{instance}.")
        new = store.ingest("chat", "b", "{}", T0 + 6).id
        assert new == report.next_id  # the epoch's first event
        assert store.event_keys([first, new]) == {first: kept[first],
                                                  new: f"{prefix}-event-{new}"}
        say(store, T0 + 7, "hello")
        sent = store.claim_dispatch(T0 + 7, "at-least-once", 0, 60)
        assert isinstance(sent, Dispatch) and sent.key.startswith(f"{prefix}-")

        # a second restore: each event keeps the key of the epoch it was made in
        with restored(store, tmp_path / "two", T0 + 8) as (newer, second):
            latest = newer.ingest("chat", "c", "{}", T0 + 9).id
            assert newer.key_prefix() == second.key_prefix not in (prefix, instance)
            assert newer.event_keys([first, new, latest]) == {
                first: kept[first], new: f"{prefix}-event-{new}",
                latest: f"{second.key_prefix}-event-{latest}"}


def test_a_claim_hands_each_event_s_key_of_its_epoch_and_the_state_as_it_stands(
        backend: Store, tmp_path: Path) -> None:
    """What a handler is handed beside its events is read under the claim's lock: the
    key each event keeps (its epoch's, after a restore) and the state's newest version."""
    first = backend.ingest("chat", "a", "{}", T0).id
    kept = backend.event_keys([first])
    with restored(backend, tmp_path / "one", T0 + 5) as (store, report):
        new = store.ingest("chat", "b", "{}", T0 + 6).id
        generation = store.acquire("W", T0 + 6, TTL)
        assert generation is not None
        assert store.set_state("W", generation, T0 + 6, {"seen": 1}, POLICY) == 1
        claimed = store.claim("W", generation, T0 + 7, POLICY)
        assert claimed is not None and [e.id for e in claimed] == [first, new]
        assert claimed.keys == {first: kept[first],
                                new: f"{report.key_prefix}-event-{new}"}
        assert claimed.state == store.state() and claimed.state.version == 1
        assert claimed.state.value() == {"seen": 1}
        empty = store.claim("W", generation, T0 + 8, POLICY)
        assert empty == [] and empty is not None
        assert (empty.keys, empty.state) == ({}, claimed.state)
