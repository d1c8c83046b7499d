"""The SQLite engine and the files under it: the empty view a reading command gets where
no inbox exists, an inbox file replaced under an open store, long reads in chunks, and
the files SQLite is let open (an empty one, a dangling symlink)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentbox import upkeep
from agentbox.backends.sqlite import db
from agentbox.backends.sqlite import engine as sqlite_engine
from agentbox.backends.sqlite.engine import SqliteEngine
from agentbox.errors import DatabaseError, NoInbox
from agentbox.ledger import copy as ledger_copy
from agentbox.ledger.store import Store
from agentbox.location import empty_view
from agentbox.rules.timers import TimerSpec
from support.clock import T0
from support.sqlite import sqlite_store
from support.store import POLICY, run, store_snapshot

pytestmark = pytest.mark.sqlite_file

READ_ONLY = "database is read-only; agentbox needs to write to it"
NOWHERE = "/nowhere/alice.sqlite3"  # an empty view stands for a file that does not exist
WAIT_MS = round(db.BUSY_TIMEOUT_S * 1000)  # the busy handler as a read leaves it


def keys(store: Store) -> list[str]:
    return [e.source_id for e in store.events()]


def engine_of(store: Store) -> SqliteEngine:
    engine = store.engine
    assert isinstance(engine, SqliteEngine)
    return engine


def busy_timeout_ms(store: Store) -> int:
    return int(engine_of(store).conn.execute("PRAGMA busy_timeout").fetchone()[0])


# -- the empty view -------------------------------------------------------------------------


def test_an_empty_view_reads_as_a_new_inbox_where_it_was_asked_for(tmp_path: Path) -> None:
    view = empty_view(NOWHERE)
    assert view.location == NOWHERE
    with sqlite_store(tmp_path / "new.sqlite3") as new:
        assert store_snapshot(view) == store_snapshot(new)
        assert view.lease() == new.lease() is None
    assert view.instance_id() == view.key_prefix()  # its inbox row is there, as a new one's
    view.close()


WRITES: dict[str, Callable[[Store], object]] = {
    "ingest": lambda s: s.ingest("hook", "1", "{}", T0),
    "ingest_many": lambda s: s.ingest_many([("hook", "1", "{}"), ("hook", "2", "{}")], T0),
    "acquire": lambda s: s.acquire("A", T0, 60),
    "add_timer": lambda s: s.add_timer(TimerSpec("digest", T0 + 60, 3600), T0),
}


def test_an_empty_view_refuses_every_write_each_time() -> None:
    """Twice over: a refused write leaves no transaction open behind it."""
    view = empty_view(NOWHERE)
    for _ in range(2):
        for name, write in WRITES.items():
            with pytest.raises(DatabaseError) as caught:
                write(view)
            assert type(caught.value) is DatabaseError, name
            assert str(caught.value) == f"{NOWHERE}: {READ_ONLY}", name  # names the inbox
    assert store_snapshot(view)["status"].events["pending"] == 0
    view.close()


def test_a_group_on_an_empty_view_is_refused_as_read_only() -> None:
    view = empty_view(NOWHERE)
    with pytest.raises(DatabaseError, match=f"^{NOWHERE}: {READ_ONLY}$"), \
            engine_of(view).group():
        pass
    view.close()


def test_an_empty_view_leaves_nothing_on_disk(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """It is held in memory: neither the location nor the working folder gets a file."""
    monkeypatch.chdir(tmp_path)
    view = empty_view(str(tmp_path / "alice.sqlite3"))
    view.status()
    with pytest.raises(DatabaseError):
        WRITES["ingest"](view)
    view.close()
    assert list(tmp_path.iterdir()) == []


def test_an_empty_view_is_read_from_any_thread() -> None:
    """A server answers from threads of its own."""
    view = empty_view(NOWHERE)
    seen: list[object] = []
    reader = threading.Thread(target=lambda: seen.append(view.status()))
    reader.start()
    reader.join(timeout=30)
    assert seen == [view.status()]
    view.close()


def test_a_failing_read_of_an_empty_view_names_its_location() -> None:
    view = empty_view(NOWHERE)
    with pytest.raises(DatabaseError) as caught:
        view._read().rows("SELECT nope FROM events")
    assert str(caught.value) == f"{NOWHERE}: database error: no such column: nope"
    view.close()


# -- an inbox file replaced under an open store ---------------------------------------------


def inbox_file(path: Path, *event_keys: str) -> Path:
    """A closed inbox file holding events of these keys (its log folded into it)."""
    with sqlite_store(path) as made:
        for key in event_keys:
            made.ingest("hook", key, "{}", T0)
    return path


def put_in_place(replacement: Path, live: str) -> Path:
    """What an operator does with a copy of an inbox: the live file moved aside, its log
    removed, the copy renamed onto its path. Returns where the old file went."""
    aside = Path(f"{live}.aside")
    os.replace(live, aside)
    for side in ("-wal", "-shm"):
        Path(f"{live}{side}").unlink(missing_ok=True)
    os.replace(replacement, live)
    return aside


def raw_keys(path: str | Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [str(r[0]) for r in conn.execute("SELECT source_id FROM events ORDER BY id")]
    finally:
        conn.close()


def test_a_replaced_inbox_is_read_and_written_where_it_now_is(store: Store,
                                                              tmp_path: Path) -> None:
    store.ingest("hook", "old", "{}", T0)
    put_in_place(inbox_file(tmp_path / "copy.sqlite3", "new"), store.location)
    assert keys(store) == ["new"]
    assert store.ingest("hook", "after", "{}", T0 + 1).outcome == "stored"
    assert raw_keys(store.location) == ["new", "after"]  # another process sees it there
    with pytest.raises(DatabaseError) as caught:
        store._read().rows("SELECT nope FROM events")
    assert str(caught.value) == f"{store.location}: database error: no such column: nope"


@pytest.mark.parametrize(("durable", "busy_timeout", "synchronous", "wait_ms"), [
    (True, None, 2, WAIT_MS),  # FULL, the default wait
    (False, 0.25, 0, 250),     # OFF, a server's short wait
], ids=["durable", "scratch"])
def test_a_reopened_inbox_keeps_the_stores_options(
        tmp_path: Path, durable: bool, busy_timeout: float | None, synchronous: int,
        wait_ms: int) -> None:
    live = str(inbox_file(tmp_path / "inbox.sqlite3"))
    with sqlite_store(live, durable=durable, busy_timeout=busy_timeout) as store:
        first = engine_of(store).conn
        put_in_place(inbox_file(tmp_path / "copy.sqlite3", "new"), live)
        assert keys(store) == ["new"]
        assert engine_of(store).conn is not first
        assert engine_of(store).conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        assert busy_timeout_ms(store) == wait_ms


def test_an_inbox_replaced_inside_a_group_is_reopened_once_it_ends(
        store: Store, tmp_path: Path) -> None:
    """A group's writes belong to its one transaction, on the file it began on."""
    store.ingest("hook", "old", "{}", T0)
    replacement = inbox_file(tmp_path / "copy.sqlite3", "new")
    with engine_of(store).group():
        first = engine_of(store).conn
        put_in_place(replacement, store.location)
        assert store.ingest("hook", "in-group", "{}", T0 + 1).outcome == "stored"
        assert keys(store) == ["old", "in-group"]
        assert engine_of(store).conn is first
    assert keys(store) == ["new"]


def test_a_group_inside_a_group_is_refused_and_the_first_goes_on(store: Store) -> None:
    """One transaction per connection: a second group would be a savepoint of the first,
    committed with it whatever it was told."""
    with engine_of(store).group():
        with pytest.raises(RuntimeError, match=r"^a group is open on this connection already$"), \
                engine_of(store).group():
            pass  # pragma: no cover - refused before it begins
        assert store.ingest("hook", "in-group", "{}", T0).outcome == "stored"
        assert engine_of(store)._grouped  # type: ignore[attr-defined]
    assert keys(store) == ["in-group"]


def test_a_removed_inbox_is_not_reopened(store: Store) -> None:
    """No file at the path is no replacement: the open file goes on, and nothing is made."""
    store.ingest("hook", "old", "{}", T0)
    first = engine_of(store).conn
    os.remove(store.location)
    assert keys(store) == ["old"]
    assert engine_of(store).conn is first
    assert not os.path.exists(store.location)


def test_a_replacement_gone_by_the_time_it_is_opened_is_no_inbox(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file seen replaced, then removed before it is opened again: reopening never
    makes a new inbox at the path."""
    os.remove(store.location)
    monkeypatch.setattr(sqlite_engine, "_identity", lambda location: (-1, -1))
    with pytest.raises(NoInbox):
        store.status()
    assert not os.path.exists(store.location)


# -- long reads, in chunks ------------------------------------------------------------------


BY_ID = "SELECT source_id FROM events WHERE inbox_id = :box ORDER BY id"


def test_a_long_read_comes_size_rows_at_a_time_and_waits_for_locks(store: Store) -> None:
    for n in range(5):
        store.ingest("hook", str(n), "{}", T0)
    assert busy_timeout_ms(store) == 0  # a write leaves the busy handler off
    chunks = list(engine_of(store).reader(sqlite_engine.BOX).chunks(BY_ID, 2))
    assert [[str(r[0]) for r in chunk] for chunk in chunks] == [["0", "1"], ["2", "3"], ["4"]]
    assert busy_timeout_ms(store) == WAIT_MS


def test_a_failing_long_read_is_translated(store: Store) -> None:
    with pytest.raises(DatabaseError) as caught:
        list(engine_of(store).reader(sqlite_engine.BOX).chunks("SELECT nope FROM events", 2))
    assert type(caught.value) is DatabaseError
    assert str(caught.value) == f"{store.location}: database error: no such column: nope"


def test_the_ledgers_copy_of_an_sqlite_inbox_takes_every_row_chunk_by_chunk(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """copy_inbox reads any engine's inbox; tables longer than a chunk come whole."""
    monkeypatch.setattr(ledger_copy, "CHUNK", 2)
    for n in range(5):
        store.ingest("hook", str(n), "{}", T0)
    run(store, "A", T0 + 1, policy=POLICY)
    with sqlite_store(tmp_path / "copy.sqlite3") as copied:
        ledger_copy.copy_inbox(store, copied)
        ids = [e.id for e in store.events()]
        assert store_snapshot(copied, ids) == store_snapshot(store, ids)
        assert copied.instance_id() == store.instance_id()


# -- upkeep waits for locks as reads do -----------------------------------------------------


UPKEEP: dict[str, Callable[[Store, Path], object]] = {
    "checks": lambda s, _: s.checks(),
    "backup": lambda s, folder: upkeep.backup(s, str(folder / "backup.sqlite3")),
}


@pytest.mark.parametrize("name", list(UPKEEP))
def test_upkeep_after_a_write_turns_the_busy_handler_back_on(
        store: Store, tmp_path: Path, name: str) -> None:
    """Its statements wait out another process's recovery of the log, as reads do."""
    store.ingest("hook", "1", "{}", T0)
    assert busy_timeout_ms(store) == 0
    UPKEEP[name](store, tmp_path)
    assert busy_timeout_ms(store) == WAIT_MS


# -- the files SQLite is let open -----------------------------------------------------------


def empty_file(path: Path, mode: int) -> Path:
    path.touch()
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602], ids=oct)
def test_an_empty_file_others_may_use_becomes_a_private_inbox(tmp_path: Path,
                                                               mode: int) -> None:
    path = empty_file(tmp_path / "touched.sqlite3", mode)
    with sqlite_store(path) as store:
        assert store.ingest("hook", "1", "{}", T0).outcome == "stored"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o600, 0o700], ids=oct)
def test_an_empty_file_already_private_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    path = empty_file(tmp_path / "touched.sqlite3", mode)
    sqlite_store(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_empty_file_of_another_user_is_refused_and_left_alone(tmp_path: Path) -> None:
    """A file planted by someone else would receive the inbox: it is not ours to use."""
    path = empty_file(tmp_path / "planted.sqlite3", 0o666)
    os.chown(path, 4242, 4242)
    with pytest.raises(DatabaseError) as caught:
        sqlite_store(path)
    assert str(caught.value) == (
        f"{path}: an empty file that belongs to another user (uid 4242); agentbox makes "
        "an inbox only in a file of its own")
    found = path.stat()
    assert (found.st_size, found.st_uid, stat.S_IMODE(found.st_mode)) == (0, 4242, 0o666)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], Path]]:
    """immutable(path): the file made unchangeable (chattr +i), even its mode, even by
    root; made changeable again at the end, so that it can be removed."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        if shutil.which("chattr") is None:
            pytest.skip("chattr is not installed")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if done.returncode:
            pytest.skip(f"chattr +i does not work here: {done.stderr.decode().strip()}")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_empty_file_that_cannot_be_made_private_is_refused(
        tmp_path: Path, immutable: Callable[[Path], Path]) -> None:
    path = immutable(empty_file(tmp_path / "shared.sqlite3", 0o644))
    with pytest.raises(DatabaseError) as caught:
        sqlite_store(path)
    assert str(caught.value) == (
        f"{path}: cannot make the new inbox private: Operation not permitted")


def test_an_empty_private_file_is_not_made_private_again(
        tmp_path: Path, immutable: Callable[[Path], Path]) -> None:
    """Its mode is left alone: what refuses it is SQLite, which cannot write to it."""
    path = immutable(empty_file(tmp_path / "frozen.sqlite3", 0o600))
    with pytest.raises(DatabaseError) as caught:
        sqlite_store(path)
    assert str(caught.value) == f"{path}: {READ_ONLY}"


def test_a_dangling_symlink_is_refused_and_nothing_made_at_its_target(
        tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "inbox.sqlite3"
    link = tmp_path / "inbox.sqlite3"
    link.symlink_to(target)
    with pytest.raises(DatabaseError) as caught:
        sqlite_store(link)
    assert str(caught.value) == (
        f"{link}: a symlink to {target}, which does not exist; agentbox does not create "
        "an inbox through a symlink: use --db with the target, or remove the link")
    assert not os.path.lexists(target) and not target.parent.exists()
