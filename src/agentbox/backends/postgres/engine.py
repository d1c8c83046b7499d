"""The ledger's engine over PostgreSQL: every user's inbox in one schema.

An inbox is a row of ``inboxes`` (made when a command that may write opens it),
and its rows in every other table carry its ``inbox_id``. A write transaction is a
:class:`~agentbox.backends.postgres.db.Tx`: its first read carries the BEGIN
and its other writes go out with the COMMIT, so a transaction costs one round
trip per read its decisions need, plus one. The inbox's lock is its
``inboxes`` row, locked ``FOR NO KEY UPDATE`` by the statement that reads the
lease: writers of one inbox queue, writers of two inboxes never meet, and any
number of hosts may share the database. Ingest takes no lock at all: one
statement stores the event under a UNIQUE key, adds it to a slot of the
tally, and wakes watchers.

The ledger's SQL names its parameters ``:name``; psycopg's are ``%(name)s``
(see :func:`dialect`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from agentbox.backends.postgres import db
from agentbox.backends.postgres.schema import COUNTED, INGEST_SLOT
from agentbox.backends.postgres.url import Target, parse
from agentbox.errors import NoInbox

if TYPE_CHECKING:
    from agentbox.backends.postgres.wake import InboxWaiter
    from agentbox.ledger.engine import Key, Params, Reader, Row, Standing, Tx
    from agentbox.rules.health import Check

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=1024)
def dialect(sql: str) -> str:
    """The ledger's ``:name`` parameters as psycopg's ``%(name)s`` (a literal ``%``
    doubled). The ledger's SQL is the same for both engines, so it holds no ``::``
    cast for this to mistake."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


# New events are pending: the statement that stores them adds them to a slot
# of the tally (see schema.INGEST_SLOT). It wakes the inbox's watchers only when
# no other event was waiting to be claimed: a watcher sleeps only when there is
# none, and a notifying transaction commits in turn with every other notifying
# one on the server, so a busy inbox's ingests must not all notify (measured:
# four processes ingesting at once lost half their rate).
_COUNT = f"""
counted AS (
    INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
    SELECT %(box)s, 'events', 'pending', {INGEST_SLOT}, COUNT(*) FROM stored
    HAVING COUNT(*) > 0
    ON CONFLICT (inbox_id, tbl, state, slot) DO UPDATE SET n = state_counts.n + excluded.n),
woken AS (
    SELECT pg_notify(current_schema(), %(box)s::text) FROM (SELECT FROM stored LIMIT 1) s
    WHERE NOT EXISTS (SELECT FROM events WHERE inbox_id = %(box)s AND status = 'pending'
                      AND available_at <= %(now)s))"""

# A key still remembered after its event was pruned is not stored again.
_NOT_REMEMBERED = """NOT EXISTS (
    SELECT FROM pruned_keys p WHERE p.inbox_id = %(box)s AND p.source = {source}
    AND p.source_id = {source_id} AND p.until > %(now)s)"""

# One event, stored and counted: (its id, NULL); or, when the key is taken, (the id,
# the payload) of the event standing under it, so a redelivery costs one round trip;
# or no row: the key is remembered after a prune, or its event was committed by
# another session after this statement's snapshot was taken (the ledger then looks
# again). A duplicate draws an id from the sequence: ids are unique, not consecutive.
_STORE = f"""
WITH stored AS (
    INSERT INTO events (inbox_id, source, source_id, payload, created_at, updated_at)
    SELECT %(box)s, %(source)s, %(source_id)s, %(payload)s, %(now)s, %(now)s
    WHERE {_NOT_REMEMBERED.format(source="%(source)s", source_id="%(source_id)s")}
    ON CONFLICT (inbox_id, source, source_id) DO NOTHING
    RETURNING id),
{_COUNT}
SELECT id, NULL FROM stored, (SELECT count(*) FROM woken) w
UNION ALL
SELECT id, payload FROM events WHERE inbox_id = %(box)s AND source = %(source)s
    AND source_id = %(source_id)s AND NOT EXISTS (SELECT FROM stored)"""

# A batch of events, stored and counted: (id, source, source_id) of each row
# stored. Only the first line of a key, and only a key not stored yet, reaches
# the INSERT, so the events a batch stores get consecutive ids, as on SQLite
# (unless another session stores one of its keys meanwhile: ON CONFLICT
# settles that). Checking first costs a single event a third of its speed.
_STORE_BATCH = f"""
WITH items AS (
    SELECT * FROM unnest(%(sources)s::text[], %(ids)s::text[], %(payloads)s::text[])
    WITH ORDINALITY AS i (source, source_id, payload, n)),
fresh AS (
    SELECT DISTINCT ON (source, source_id) * FROM items i
    WHERE NOT EXISTS (SELECT FROM events e WHERE e.inbox_id = %(box)s
                      AND e.source = i.source AND e.source_id = i.source_id)
      AND {_NOT_REMEMBERED.format(source="i.source", source_id="i.source_id")}
    ORDER BY source, source_id, n),
stored AS (
    INSERT INTO events (inbox_id, source, source_id, payload, created_at, updated_at)
    SELECT %(box)s, source, source_id, payload, %(now)s, %(now)s FROM fresh ORDER BY n
    ON CONFLICT (inbox_id, source, source_id) DO NOTHING
    RETURNING id, source, source_id),
{_COUNT}
SELECT id, source, source_id FROM stored, (SELECT count(*) FROM woken) w"""


class _Reader:
    """Statements in autocommit mode, each its own transaction."""

    __slots__ = ("box", "conn", "location")

    def __init__(self, conn: psycopg.Connection[Any], box: int, location: str) -> None:
        self.conn, self.box, self.location = conn, box, location

    def _cursor(self, sql: str, params: dict[str, Any]) -> psycopg.Cursor[Any]:
        return self.conn.execute(dialect(sql), params)

    def rows(self, sql: str, /, **params: Any) -> list[Row]:
        params["box"] = self.box
        try:
            return self._cursor(sql, params).fetchall()
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    def one(self, sql: str, /, **params: Any) -> Row | None:
        params["box"] = self.box
        try:
            return self._cursor(sql, params).fetchone()
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    def chunks(self, sql: str, size: int, /, **params: Any) -> Iterator[list[Row]]:
        """The rows of a long read, ``size`` at a time, from a cursor on the server
        (inside :meth:`PostgresEngine.snapshot`'s transaction)."""
        params["box"] = self.box
        try:
            with self.conn.cursor(name="agentbox_chunks") as cursor:
                cursor.execute(dialect(sql), params)
                while chunk := cursor.fetchmany(size):
                    yield chunk
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None


class _Tx(_Reader):
    """The ledger's :class:`~agentbox.ledger.engine.Tx` over a queueing transaction:
    a read carries the writes queued before it."""

    __slots__ = ("tx",)

    def __init__(self, tx: db.Tx, location: str) -> None:
        super().__init__(tx.conn, tx.id, location)
        self.tx = tx

    def _cursor(self, sql: str, params: dict[str, Any]) -> psycopg.Cursor[Any]:
        return self.tx.read(dialect(sql), params)

    def run(self, sql: str, /, **params: Any) -> None:
        params["box"] = self.box
        self.tx.write(dialect(sql), params)

    def many(self, sql: str, rows: Iterable[Params]) -> None:
        """One statement: an INSERT's VALUES repeated for every row of two or more
        (the values written in), else the statement (prepared) once per row, all
        queued together."""
        rows = [{**row, "box": self.box} for row in rows]
        head, values, tail = sql.rpartition("VALUES")
        tail = tail.strip()
        if len(rows) > 1 and values and tail.startswith("(") and tail.endswith(")"):
            self.tx.queue(head + "VALUES " + ", ".join(self.tx.bind(dialect(tail), row)
                                                        for row in rows))
            return
        for row in rows:
            self.tx.write(dialect(sql), row)

    def reads(self, *queries: tuple[str, Params]) -> list[list[Row]]:
        try:
            return self.tx.reads([(dialect(sql), {**params, "box": self.box})
                                  for sql, params in queries])
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    def last(self, sql: str, /, **params: Any) -> list[Row]:
        params["box"] = self.box
        try:
            return self.tx.last(dialect(sql), params)
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None


def _own(tx: Tx) -> db.Tx:
    """The queueing transaction under one of this engine's ledger transactions."""
    assert isinstance(tx, _Tx), "a transaction of another engine"
    return tx.tx


class PostgresEngine:
    """The inbox of one user in the database (and schema) a URL names."""

    lock_clause = " FOR NO KEY UPDATE"

    def __init__(self, url: str, user: str, *, durable: bool, lock_timeout: float | None,
                 create: bool) -> None:
        from agentbox.paths import check_user

        user = check_user(user)
        self.target = parse(url)
        self.location = self.target.location
        self.conn: psycopg.Connection[Any] = db.connect(self.target, durable, lock_timeout,
                                                        create)
        self._owns_conn = True
        # As a command that may write makes an SQLite inbox by opening its file, it
        # makes this inbox's row by opening it; one that only reads makes nothing.
        try:
            found = db.find_inbox(self.conn, user)
            if found is None and create:
                found = db.create_inbox(self.conn, user)
        except psycopg.Error as exc:
            self.conn.close()
            raise db.translate(exc, self.location) from None
        if found is None:
            self.conn.close()
            raise NoInbox(f"{self.location} (user {user})")
        self.box = found

    @classmethod
    def sharing(cls, conn: psycopg.Connection[Any], target: Target, box: int
                ) -> PostgresEngine:
        """The engine of the inbox ``box``, found already, on a connection it shares (and
        does not close): how one process serves every inbox of a schema without a
        connection each."""
        engine = cls.__new__(cls)
        engine.target, engine.location = target, target.location
        engine.conn, engine._owns_conn, engine.box = conn, False, box
        return engine

    def reader(self, box: int) -> _Reader:
        return _Reader(self.conn, box, self.location)

    def glance(self, box: int) -> None:
        """None: a read first would cost every new event a round trip."""
        return None

    def group(self) -> None:
        """None: the server commits concurrent transactions together itself, and writers
        of one inbox queue on its row lock without polling."""
        return None

    @contextmanager
    def write(self, box: int, *, durable: bool) -> Iterator[_Tx]:
        """A queueing transaction; not durable: ``synchronous_commit = off`` for it alone
        (the write-ahead log is written in order, so the next durable commit carries
        it to disk)."""
        try:
            with db.transaction(self.conn, box) as tx:
                if not durable:
                    tx.write("SET LOCAL synchronous_commit = off")
                yield _Tx(tx, self.location)
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    @contextmanager
    def snapshot(self, box: int) -> Iterator[_Reader]:
        """One REPEATABLE READ transaction; psycopg ends it, and when it ends it with a
        ROLLBACK every prepared statement goes (see :class:`db.Prepared`)."""
        try:
            with self.conn.transaction():
                self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                yield self.reader(box)
        except BaseException as exc:
            if not self.conn.closed:
                with suppress(psycopg.Error):
                    db.forget_prepared(self.conn, rollback=False)  # psycopg's was sent
            if isinstance(exc, psycopg.Error):
                raise db.translate(exc, self.location) from None
            raise

    def store_event(self, tx: Tx | None, box: int, source: str, source_id: str,
                    payload: str, now: int) -> int | Standing | None:
        args = {"box": box, "source": source, "source_id": source_id, "payload": payload,
                "now": now}
        try:
            found = (self.conn.execute(_STORE, args) if tx is None
                     else _own(tx).read(_STORE, args)).fetchone()
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None
        if found is None:
            return None
        return int(found[0]) if found[1] is None else (int(found[0]), str(found[1]))

    def store_events(self, tx: Tx, items: Sequence[tuple[str, str, str]],
                     now: int) -> dict[Key, int]:
        args = {"sources": [s for s, _, _ in items], "ids": [i for _, i, _ in items],
                "payloads": [p for _, _, p in items], "box": tx.box, "now": now}
        try:
            rows = _own(tx).read(_STORE_BATCH, args).fetchall()
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None
        return {(str(s), str(i)): int(n) for n, s, i in rows}

    def new_id(self, table: str, n: int) -> str:
        return "DEFAULT"  # a sequence: it never goes back, whatever was deleted

    def counts(self, reader: Reader) -> dict[str, dict[str, int]]:
        """Every state of every counted table, each the sum of its slots."""
        found: dict[tuple[str, str], int] = {
            (str(t), str(s)): int(n) for t, s, n in reader.rows(
                """SELECT tbl, state, SUM(n) FROM state_counts WHERE inbox_id = :box
                   GROUP BY tbl, state""")}
        return {table: {state: found.get((table, state), 0) for state in states}
                for table, (_, states) in COUNTED.items()}

    def recount(self, tx: Tx) -> None:
        tx.run("DELETE FROM state_counts WHERE inbox_id = :box")
        for table, (column, _) in COUNTED.items():
            tx.run(f"""INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
                       SELECT :box, '{table}', {column}, 0, COUNT(*) FROM {table}
                       WHERE inbox_id = :box GROUP BY {column}""")

    def waiter(self, box: Callable[[], int | None]) -> InboxWaiter:
        from agentbox.backends.postgres.wake import InboxWaiter

        return InboxWaiter(self.target, self.conn, box)

    def checks(self) -> list[Check]:
        from agentbox.backends.postgres import upkeep

        return upkeep.checks(self.reader(0))

    def disk_bytes(self, reader: Reader) -> int:
        from agentbox.backends.postgres import upkeep

        return upkeep.disk_bytes(reader)

    def reclaim(self, budget: int) -> int:
        return 0  # autovacuum hands freed room to new rows by itself

    def copy_file(self, dest: Path) -> bool:
        return False  # a copy is an SQLite inbox file, written row by row by the ledger

    def close(self) -> None:
        if self._owns_conn:
            self.conn.close()
