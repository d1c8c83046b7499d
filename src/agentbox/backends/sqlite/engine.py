"""The ledger's engine over one SQLite file: the inbox is the file.

Write transactions are ``BEGIN IMMEDIATE`` (:func:`~agentbox.backends.sqlite.db.write`):
the file's write lock is taken up front, so the inbox's lock needs no statement
of its own and two writers queue instead of one failing half-way. A new
event is one autocommit INSERT, counted by trigger; a key still remembered
after a prune is refused by trigger (``events_remembered``), silently, as a
taken one is by ``ON CONFLICT DO NOTHING``. A file holds one inbox: its row
in ``inboxes`` is always 1, made by the migration that made the table.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.backends.sqlite import db
from agentbox.backends.sqlite.schema import COUNTED

if TYPE_CHECKING:
    from agentbox.backends.sqlite.wake import InboxWaiter
    from agentbox.ledger.engine import Key, Params, Reader, Row, Tx
    from agentbox.rules.health import Check

BOX = 1  # the one inbox of a file

# A new event is numbered above the highest id the inbox has handed out (its
# ``event_floor``, raised by a prune or a restore), not only above the highest
# row left: SQLite alone would number it after the highest row, and give out
# again the ids of pruned newest rows. Both look-ups are one index step.
_ABOVE = "max({floor}, ifnull((SELECT max(id) FROM {table}), 0))"
_TOP = {"events": _ABOVE.format(floor="event_floor", table="events"),
        "outbox": _ABOVE.format(floor="message_floor", table="outbox")}
_INSERT = f"""INSERT INTO events (id, inbox_id, source, source_id, payload, created_at,
                                  updated_at)
             VALUES ((SELECT {_TOP["events"]} + 1 FROM inboxes WHERE id = ?1), ?1, ?2, ?3, ?4,
                     ?5, ?5)
             ON CONFLICT (source, source_id) DO NOTHING RETURNING id"""
# A batch in one statement, sent as a JSON array. ``ORDER BY key`` keeps the
# batch's order, so its events get ids in that order; the trigger that refuses
# remembered keys and the conflict clause leave out the keys already taken.
# While the floor is above every row (just after a prune or a restore) the batch
# is numbered from it, by position (a key left out leaves its number unused);
# otherwise SQLite numbers the rows stored one after another.
_INSERT_BATCH = """INSERT INTO events (id, inbox_id, source, source_id, payload, created_at,
                                       updated_at)
                   SELECT CASE WHEN f.floor > f.top THEN f.floor + key + 1 END, ?1,
                          json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                          json_extract(value, '$[2]'), ?2, ?2
                   FROM json_each(?3),
                        (SELECT event_floor AS floor,
                                ifnull((SELECT max(id) FROM events), 0) AS top
                         FROM inboxes WHERE id = ?1) AS f
                   WHERE true ORDER BY key
                   ON CONFLICT (source, source_id) DO NOTHING
                   RETURNING id, source, source_id"""


def _identity(location: str) -> tuple[int, int] | None:
    """Which file is at ``location`` now (None: none)."""
    try:
        found = os.stat(location)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class _Reader:
    """Statements on the file's one connection; errors leave as agentbox's own.

    Each read turns SQLite's busy handler back on first, should a write have
    turned it off (:func:`~agentbox.backends.sqlite.db.take_write_lock`): a read
    waits, as it always did, while another process recovers the log.
    """

    __slots__ = ("box", "conn", "location")
    waits = True

    def __init__(self, conn: sqlite3.Connection, box: int, location: str) -> None:
        self.conn, self.box, self.location = conn, box, location

    def rows(self, sql: str, /, **params: Any) -> list[Row]:
        params["box"] = self.box
        try:
            if self.waits:
                db.waiting(self.conn)
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None

    def one(self, sql: str, /, **params: Any) -> Row | None:
        params["box"] = self.box
        try:
            if self.waits:
                db.waiting(self.conn)
            row: Row | None = self.conn.execute(sql, params).fetchone()
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None
        return row

    def chunks(self, sql: str, size: int, /, **params: Any) -> Iterator[list[Row]]:
        """The rows of a long read, ``size`` at a time."""
        params["box"] = self.box
        try:
            if self.waits:
                db.waiting(self.conn)
            cursor = self.conn.execute(sql, params)
            while chunk := cursor.fetchmany(size):
                yield chunk
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None


class _Glance(_Reader):
    """A look before a write (see :meth:`SqliteEngine.glance`): it never waits for a
    lock; should one be held against it, it is Busy and the write path decides."""

    __slots__ = ()
    waits = False


class _Tx(_Reader):
    """A ``BEGIN IMMEDIATE`` transaction: every statement runs at once, in order (the
    write lock is held: none waits)."""

    __slots__ = ()
    waits = False

    def run(self, sql: str, /, **params: Any) -> None:
        self.rows(sql, **params)

    def many(self, sql: str, rows: Iterable[Params]) -> None:
        try:
            self.conn.executemany(sql, [{**row, "box": self.box} for row in rows])
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None

    def reads(self, *queries: tuple[str, Params]) -> list[list[Row]]:
        return [self.rows(sql, **params) for sql, params in queries]

    def last(self, sql: str, /, **params: Any) -> list[Row]:
        return self.rows(sql, **params)


class SqliteEngine:
    """One inbox file, on one connection, shared by nothing else."""

    lock_clause = ""  # BEGIN IMMEDIATE holds the file's write lock already
    box = BOX

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True,
                 make_folders: bool = True, create: bool = True,
                 busy_timeout: float | None = None) -> None:
        from agentbox.backends.sqlite import presence

        self.location = os.fspath(path)
        self._options = (durable, busy_timeout)
        self.conn: sqlite3.Connection = db.connect(path, durable=durable,
                                                   make_folders=make_folders, create=create,
                                                   busy_timeout=busy_timeout)
        try:
            self._presence = presence.hold(
                self.location, db.BUSY_TIMEOUT_S if busy_timeout is None else busy_timeout)
        except BaseException:
            self.conn.close()
            raise
        self._file = _identity(self.location)
        self._reader = _Reader(self.conn, BOX, self.location)
        self._grouped = False  # a group's transaction is open: writes are savepoints

    @classmethod
    def empty(cls, location: str) -> SqliteEngine:
        """An empty inbox in memory that refuses writes, standing for ``location``."""
        engine = cls.__new__(cls)
        engine.location = location
        engine.conn = db.connect_empty()
        engine._presence, engine._file = None, None
        engine._reader = _Reader(engine.conn, BOX, location)
        engine._grouped = False
        return engine

    def current(self) -> sqlite3.Connection:
        """The connection, opened again first when the file at the inbox's path is no
        longer the one it was open on (a restore, or a file copied in by hand): a
        long-running process then works on the inbox that is there now. One stat."""
        if self._file is not None and not self._grouped \
                and _identity(self.location) not in (self._file, None):
            self._reopen()
        return self.conn

    def _reopen(self) -> None:
        durable, busy_timeout = self._options
        conn = db.connect(self.location, durable=durable, create=False,
                          busy_timeout=busy_timeout)
        self.conn.close()
        self.conn, self._file = conn, _identity(self.location)
        self._reader = _Reader(conn, BOX, self.location)

    def reader(self, box: int) -> _Reader:
        """The file's one inbox: :attr:`box` names no other, so ``box`` is always BOX
        (the file at the inbox's path now: a replaced file is reopened first)."""
        self.current()
        return self._reader

    def glance(self, box: int) -> _Glance:
        """A read costs no round trip here, and takes no lock in WAL mode (of the file at
        the inbox's path now: a glance at a replaced file could call a new key known)."""
        return _Glance(self.current(), box, self.location)

    @contextmanager
    def write(self, box: int, *, durable: bool) -> Iterator[_Tx]:
        with self._translated():
            if self._grouped:
                with db.savepoint(self.conn):
                    yield _Tx(self.conn, box, self.location)
                return
            conn = self.current()
            with db.write(conn, durable):
                yield _Tx(conn, box, self.location)

    @contextmanager
    def group(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction, durable, that the writes inside join."""
        if self._grouped:
            raise RuntimeError("a group is open on this connection already")
        with self._translated(), db.write(self.current()):
            self._grouped = True
            try:
                yield
            finally:
                self._grouped = False

    @contextmanager
    def snapshot(self, box: int) -> Iterator[_Reader]:
        """A read transaction: in WAL mode it sees one commit while writers go on (inside a
        group, the group's transaction is one already)."""
        if self._grouped:
            yield self.reader(box)
            return
        with self._translated():
            conn = self.current()
            db.waiting(conn)
            conn.execute("BEGIN")
            try:
                yield self.reader(box)
            finally:
                self.conn.execute("ROLLBACK")

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None

    def store_event(self, tx: Tx | None, box: int, source: str, source_id: str,
                    payload: str, now: int) -> int | None:
        params = (box, source, source_id, payload, now)
        try:  # not _translated(): a generator's set-up costs every ingest
            # Outside a transaction the INSERT is one: it waits for the lock in short steps.
            rows = (db.take_write_lock(self.current(), _INSERT, params) if tx is None
                    else self.conn.execute(_INSERT, params).fetchall())
        except sqlite3.Error as exc:
            raise db.translate(exc, self.location) from None
        return int(rows[0][0]) if rows else None

    def store_events(self, tx: Tx, items: Sequence[tuple[str, str, str]],
                     now: int) -> dict[Key, int]:
        # orjson writes the batch many times faster than json; only a batch loads it
        import orjson

        with self._translated():
            rows = self.conn.execute(_INSERT_BATCH, (tx.box, now,
                                                     orjson.dumps(list(items)).decode())).fetchall()
        return {(str(s), str(i)): int(n) for n, s, i in rows}

    def new_id(self, table: str, n: int) -> str:
        return f"(SELECT {_TOP[table]} + {n} FROM inboxes WHERE id = :box)"

    def counts(self, reader: Reader) -> dict[str, dict[str, int]]:
        """The trigger-kept tallies, every state present."""
        found: dict[tuple[str, str], int] = {
            (str(t), str(s)): int(n)
            for t, s, n in reader.rows("SELECT tbl, state, n FROM state_counts")}
        return {table: {state: found.get((table, state), 0) for state in states}
                for table, (_, states) in COUNTED.items()}

    def recount(self, tx: Tx) -> None:
        for table, (column, _) in COUNTED.items():
            tx.run(f"""UPDATE state_counts SET n = (SELECT COUNT(*) FROM {table}
                                                   WHERE {column} = state_counts.state)
                       WHERE tbl = '{table}'""")

    def waiter(self, box: Callable[[], int | None]) -> InboxWaiter:
        from agentbox.backends.sqlite.wake import InboxWaiter

        return InboxWaiter(self.current, self.location)

    def checks(self) -> list[Check]:
        from agentbox.backends.sqlite import upkeep

        conn = self.current()
        db.waiting(conn)
        return upkeep.checks(conn, self.location)

    def disk_bytes(self, reader: Reader) -> int:
        from agentbox.backends.sqlite import upkeep

        return upkeep.disk_bytes(self.location)

    def reclaim(self, budget: int) -> int:
        """Up to ``budget`` free pages handed back; once none are left, the log too."""
        from agentbox.backends.sqlite import upkeep

        with self._translated():
            conn = self.current()
            db.waiting(conn)
            return upkeep.reclaim(conn, budget)

    def copy_file(self, dest: Path) -> bool:
        from agentbox.backends.sqlite import upkeep

        with self._translated():
            conn = self.current()
            db.waiting(conn)
            upkeep.vacuum_into(conn, dest)
        return True

    def close(self) -> None:
        from agentbox.backends.sqlite import presence

        self.conn.close()
        presence.release(self._presence)
        self._presence = None
