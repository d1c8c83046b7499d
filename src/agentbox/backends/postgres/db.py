"""Connecting to PostgreSQL: sessions, the schema, migrations, transactions, errors.

Every inbox of a database lives in one PostgreSQL schema (``agentbox`` unless
the URL says ``?schema=NAME``), one row of its ``inboxes`` table per user.
The schema is created and migrated under a transaction-scoped advisory lock,
each migration in one transaction with its record, so any number of
processes may open a new database at once. A schema from a newer agentbox is
refused before anything is written to it.

Writes run in a :class:`Tx`: its first read carries the BEGIN and its writes
go out with the COMMIT, so a transaction costs one round trip per read its
decisions need, plus one.
"""

from __future__ import annotations

import functools
import re
import secrets
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple
from weakref import WeakKeyDictionary

import psycopg
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus

from agentbox.backends.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from agentbox.backends.postgres.url import Target, parse, with_schema
from agentbox.errors import BadInput, Busy, DatabaseError, NoInbox, UsageError

LOCK_TIMEOUT_S = 30  # as long as SQLite's busy timeout: then Busy (exit 75)
# A process stopped inside a transaction (SIGSTOP, a debugger) would hold its
# inbox's lock for good; the server ends such a session after this long.
IDLE_IN_TRANSACTION_S = 15
CONNECT_TIMEOUT_S = 10
# The advisory lock that serialises migrations: "AGBX" and the schema's hash.
_MIGRATION_LOCK = 0x41474258
# SQLSTATEs a retry can cure: lock_timeout, serialization and deadlock
# failures, too many connections, a server starting up or shutting down.
_TRANSIENT = {"55P03", "40001", "40P01", "53300", "57P03"}
IDLE = TransactionStatus.IDLE
Params = Sequence[Any] | Mapping[str, Any]


def translate(exc: psycopg.Error, where: str) -> Exception:
    """Turn a psycopg error into the agentbox error a user can act on."""
    state = exc.sqlstate or ""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if state in _TRANSIENT:
        return Busy(f"{where}: database stayed busy ({first}); try again")
    if state == "42501":
        return DatabaseError(f"{where}: permission denied: {first}")
    if state in ("22021", "22P05") or "0x00" in first:
        return BadInput(f"{where}: text with a NUL character cannot be stored in PostgreSQL")
    if state == "22003":
        return BadInput(f"{where}: a number is out of range (the largest is 2**63 - 1)")
    if state.startswith("08") or (not state and isinstance(exc, psycopg.OperationalError)):
        return DatabaseError(f"{where}: cannot connect to PostgreSQL: {_reason(first)}")
    if state.startswith("57P"):
        return DatabaseError(f"{where}: the server ended the session: {first}")
    if state == "53100":
        return DatabaseError(f"{where}: the database server's disk is full: {first}")
    return DatabaseError(f"{where}: database error: {first}")


def _reason(text: str) -> str:
    """libpq's connection failure without the repeated host details it starts with."""
    for marker in ("failed: ", "error: "):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    return text


def session(target: Target, durable: bool = True,
            lock_timeout: float = LOCK_TIMEOUT_S) -> psycopg.Connection[Any]:
    """A connection in autocommit mode with the schema on its search path.

    ``durable`` sets ``synchronous_commit = on`` whatever the server's default,
    so an acknowledged write survives a crash of the server (off: scratch
    inboxes). ``lock_timeout`` (seconds) bounds a wait for an inbox's lock
    before :class:`Busy`.
    """
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(target.conninfo)
    except psycopg.ProgrammingError as exc:
        raise UsageError(f"{target.location}: not a usable PostgreSQL URL: "
                         f"{str(exc).strip()}") from None
    settings = (f"-c search_path={target.schema} "
                f"-c lock_timeout={max(1, round(lock_timeout * 1000))}ms "
                f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_S}s "
                f"-c synchronous_commit={'on' if durable else 'off'}")
    params["options"] = f"{params.get('options') or ''} {settings}".strip()
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "agentbox")
    try:
        return psycopg.connect(make_conninfo("", **params), autocommit=True)
    except psycopg.Error as exc:
        raise translate(exc, target.location) from None


def connect(target: Target, durable: bool = True, lock_timeout: float | None = None,
            create: bool = True) -> psycopg.Connection[Any]:
    """Open a session (see :func:`session`) on a schema migrated to this version.

    ``lock_timeout`` defaults to :data:`LOCK_TIMEOUT_S`. Without ``create`` a
    schema that has no tables yet is :class:`NoInbox`, and nothing is made.
    """
    conn = session(target, durable, LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout)
    try:
        if not create and _version(conn) is None:
            raise NoInbox(target.location)
        migrate(conn, target)
    except psycopg.Error as exc:
        conn.close()
        raise translate(exc, target.location) from None
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def temporary_schema(url: str, prefix: str = "agentbox_tmp") -> Iterator[str]:
    """``url`` naming a fresh schema, dropped with everything in it afterwards.

    For throwaway inboxes: the scenario runner and the tests.
    """
    fresh = with_schema(url, f"{prefix}_{secrets.token_hex(6)}")
    try:
        yield fresh
    finally:
        drop_schema(parse(fresh))


def drop_schema(target: Target) -> None:
    with session(target) as conn:
        try:
            conn.execute(f"DROP SCHEMA IF EXISTS {target.schema} CASCADE")
        except psycopg.Error as exc:
            raise translate(exc, target.location) from None


def _version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema's version, or None when it has no migrations table yet."""
    try:
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM migrations").fetchone()
    except pgerrors.UndefinedTable:
        return None
    assert row is not None  # an aggregate: always one row
    return int(row[0])


def _check_version(version: int, target: Target) -> None:
    if version > SCHEMA_VERSION:
        raise DatabaseError(
            f"{target.location}: schema {target.schema} was made by a newer agentbox "
            f"(schema {version}, this one knows up to {SCHEMA_VERSION}); upgrade agentbox "
            "to use it")


def migrate(conn: psycopg.Connection[Any], target: Target) -> None:
    """Bring the schema up to date; one query when it already is.

    Every missing migration runs in one transaction, after taking the advisory
    lock and reading the version again, so processes racing to create the same
    schema apply each migration exactly once, and a process stopped part way
    leaves the schema as it found it. The statements go out as one message:
    a new schema costs one round trip for its tables and one commit.
    """
    version = _version(conn)
    if version is not None:
        _check_version(version, target)
        if version == SCHEMA_VERSION:
            return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                     (_MIGRATION_LOCK, target.schema))
        if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                        (target.schema,)).fetchone() is None:
            # Only when missing: CREATE SCHEMA needs the CREATE privilege on the
            # database even with IF NOT EXISTS, and a schema made by an
            # administrator must not need it.
            conn.execute(f"CREATE SCHEMA {target.schema}")
        version = _version_in_transaction(conn, target)
        _check_version(version, target)
        missing = range(version, SCHEMA_VERSION)
        if missing:
            conn.execute(";\n".join(
                [statement for v in missing for statement in MIGRATIONS[v]]
                + [f"""INSERT INTO migrations (version, applied_at)
                       VALUES ({v + 1}, extract(epoch FROM now())::bigint)""" for v in missing]))


def _version_in_transaction(conn: psycopg.Connection[Any], target: Target) -> int:
    """The version under the migration lock; refuse a schema that is not agentbox's."""
    row = conn.execute(
        """SELECT to_regclass('migrations') IS NOT NULL,
                  (SELECT COUNT(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm'))""",
        (target.schema,)).fetchone()
    assert row is not None
    has_migrations, relations = row
    if not has_migrations:
        if relations:
            raise DatabaseError(f"{target.location}: schema {target.schema} holds tables, "
                                "but not an agentbox database; pick another with ?schema=")
        return 0
    version = conn.execute("SELECT COALESCE(MAX(version), 0) FROM migrations").fetchone()
    assert version is not None  # an aggregate: always one row
    return int(version[0])


# The statements one session keeps prepared, as psycopg keeps its own: the
# ledger's id lists make a statement's text vary, so the least used go.
PREPARED_MAX = 100
_PLACEHOLDER = re.compile(r"%(?:\((\w+)\)s|%)")
# A list of values a row must be among (a batch's ids): left to a plan of its own each
# time. The server's generic plan cannot see how many rows the list's inbox holds, and
# measured: for a batch of 100 events it walked every event of the inbox (10 ms, where
# the plan for the values took 0.1 ms); the statement's work outweighs its planning.
_VALUE_LIST = re.compile(r"\bIN \(\$\d+, ")


class _Numbered(NamedTuple):
    text: str  # the query with the server's $1, $2 … (a doubled % undoubled)
    names: tuple[str, ...]  # the parameters in that order
    lists_values: bool  # a list of values to match: never prepared (see _VALUE_LIST)


@functools.lru_cache(maxsize=1024)
def _numbered(query: str) -> _Numbered:
    """``query``'s ``%(name)s`` parameters as the server's ``$1``, ``$2`` …, worked out
    once for each text a session sends."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        name = found.group(1)
        if name is None:
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    text = _PLACEHOLDER.sub(number, query)
    return _Numbered(text, tuple(names), _VALUE_LIST.search(text) is not None)


def _declared(value: Any) -> str:
    """The type a parameter is declared with: an integer is a ``bigint`` wherever it is
    compared (one parameter may meet an ``integer`` and a ``bigint`` column), any
    other value takes the type of the place it is used in."""
    if isinstance(value, bool):
        return "boolean"
    return "bigint" if isinstance(value, int) else "unknown"


class Prepared:
    """The statements one session has prepared (``PREPARE``, ``EXECUTE``), so a statement
    a long-lived process sends again in a transaction is neither parsed nor, once the
    server settles on a generic plan, planned again: a claim's reads cost a third as
    much.

    :class:`Tx` sends a statement's PREPARE at the head of the message that first
    executes it, so preparing costs no round trip; psycopg's own prepared
    statements need the extended protocol, one statement per message, which
    would cost a transaction a round trip per statement (psycopg keeps preparing
    the statements sent on their own, outside a transaction). A transaction given
    up before its PREPARE went out forgets it. psycopg deallocates every statement
    of the session when it sees a ROLLBACK while it holds statements of its own,
    and a PREPARE outlives a failed message: so a transaction that failed after
    sending anything ends with ``DEALLOCATE ALL`` (:func:`forget_prepared`), which
    psycopg sees too, and both records start again empty. The names carry a
    token of this record's own, so a session a pooler hands on with another
    client's statements still prepared can never run one of those.
    """

    def __init__(self, limit: int = PREPARED_MAX) -> None:
        self.limit = limit
        self.prefix = f"agentbox_{secrets.token_hex(4)}_"
        # (text, parameter types) -> (name, the EXECUTE of it)
        self._names: OrderedDict[tuple[str, tuple[str, ...]], tuple[str, str]] = OrderedDict()
        self._serial = 0
        # Displaced names, deallocated by the next transaction: one the transaction that
        # displaced them may still execute.
        self.stale: list[str] = []

    def use(self, query: str, types: tuple[str, ...]) -> tuple[str, str, str | None]:
        """The name ``query`` (``$n`` parameters of ``types``) is prepared under, the
        statement that executes it (``%s`` for each value), and its PREPARE when the
        session holds it not yet."""
        key = (query, types)
        found = self._names.get(key)
        if found is not None:
            self._names.move_to_end(key)
            return *found, None
        if len(self._names) >= self.limit:
            self.stale.append(self._names.popitem(last=False)[1][0])
        self._serial += 1
        name = f"{self.prefix}{self._serial}"
        execute = f"EXECUTE {name}({', '.join(['%s'] * len(types))})" if types else (
            f"EXECUTE {name}")
        self._names[key] = (name, execute)
        declared = f"({', '.join(types)})" if types else ""
        return name, execute, f"PREPARE {name}{declared} AS {query}"

    def forget(self, names: Iterable[str]) -> None:
        """Statements whose PREPARE never went out."""
        gone = set(names)
        for key, (name, _) in list(self._names.items()):
            if name in gone:
                del self._names[key]

    def reset(self) -> None:
        """The session holds none: ``DEALLOCATE ALL`` went out."""
        self._names.clear()
        self.stale.clear()


_PREPARED: WeakKeyDictionary[psycopg.Connection[Any], Prepared] = WeakKeyDictionary()


def prepared(conn: psycopg.Connection[Any]) -> Prepared:
    """The record of ``conn``'s prepared statements (a new session has none)."""
    found = _PREPARED.get(conn)
    if found is None:
        found = _PREPARED[conn] = Prepared()
    return found


class Tx:
    """One transaction on one inbox; see :func:`transaction`.

    Reads go out at once, with every write queued before them in the same
    message; writes wait, and go out with the COMMIT. Every message is a
    whole request, so whenever this process stops (SIGSTOP, a frozen
    container) its session is idle in a transaction, the state in which the
    server ends it after ``IDLE_IN_TRANSACTION_S`` and frees its locks. A
    statement with parameters is executed by name (:class:`Prepared`).
    """

    def __init__(self, conn: psycopg.Connection[Any], box_id: int) -> None:
        self.conn = conn
        self.id = box_id
        self._queued: list[str] = ["BEGIN"]
        self._prepared = prepared(conn)
        # Due at the head of the next message: what to deallocate, what to prepare.
        self._stale = self._prepared.stale[:]
        self._prepared.stale.clear()
        self._new: list[tuple[str, str]] = []  # (name, its PREPARE)
        self._unsure = False  # a message with PREPAREs or DEALLOCATEs in it failed
        self._bind = psycopg.ClientCursor(conn)
        self._done = False  # committed by :meth:`last`

    def read(self, query: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor[Any]:
        assert not self._done, "a statement after the transaction's last"
        return self._send(self._statement(query, params))

    def reads(self, queries: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[Any]]:
        """The rows of each of ``queries``, sent in one message after the writes queued
        before them (each statement, under READ COMMITTED, sees what those before it
        did: a lock the first one took holds for the next)."""
        cursor = self._send(*(self._statement(q, p) for q, p in queries))
        found = [cursor.fetchall()]
        while cursor.nextset():
            found.append(cursor.fetchall())
        return found

    def last(self, query: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        """The rows of the transaction's last statement, sent with its COMMIT."""
        cursor = self._send(self._statement(query, params), "COMMIT")
        self._done = True
        return cursor.fetchall()

    def write(self, query: str, params: Mapping[str, Any] | None = None) -> None:
        """Queue a statement whose answer nobody reads."""
        self.queue(self._statement(query, params))

    def queue(self, sql: str) -> None:
        """Queue SQL as the server will read it (its values written in: see :meth:`bind`)."""
        assert not self._done, "a statement after the transaction's last"
        self._queued.append(sql)

    def bind(self, query: str, params: Mapping[str, Any]) -> str:
        """``query`` with its parameters written in, as the server will read it."""
        return self._bind.mogrify(query, params)

    def _statement(self, query: str, params: Mapping[str, Any] | None) -> str:
        """What the server is sent for ``query``: its prepared statement executed, when
        it has parameters and no list of values."""
        text, names, lists_values = _numbered(query)
        if not params:
            return text
        if lists_values:
            return self.bind(query, params)
        values = [params[name] for name in names]
        name, execute, prepare = self._prepared.use(text, tuple(map(_declared, values)))
        if prepare is not None:
            self._new.append((name, prepare))
        return self._bind.mogrify(execute, values) if values else execute

    def _send(self, *statements: str) -> psycopg.Cursor[Any]:
        """What is due, the queued statements and ``statements`` as one message, the
        cursor at the answer of the first of ``statements``. Whether or not the message
        succeeds, what was due and queued has gone out."""
        due = [*(f"DEALLOCATE {name}" for name in self._stale),
               *(prepare for _, prepare in self._new)]
        ahead = [*due, *self._queued]
        self._stale, self._new = [], []
        self._queued.clear()
        try:
            cursor = self.conn.execute(";\n".join([*ahead, *statements]))
        except psycopg.Error:
            self._unsure = self._unsure or bool(due)
            raise
        for _ in ahead:
            cursor.nextset()
        return cursor

    def commit(self) -> None:
        if not self._done:
            self._send("COMMIT")

    def rollback(self) -> None:
        """Undo what reached the server, if anything did: the session's own status
        says so (no round trip), whatever message failed on the way. What was due and
        never went out stays due; a ROLLBACK, or a failed message that carried
        PREPAREs, takes every prepared statement with it (see :class:`Prepared`)."""
        self._queued.clear()
        self._prepared.forget(name for name, _ in self._new)
        self._prepared.stale.extend(self._stale)
        self._stale, self._new = [], []
        if self.conn.closed:
            return
        begun = self.conn.info.transaction_status != IDLE
        if begun or self._unsure:
            forget_prepared(self.conn, rollback=begun)


def forget_prepared(conn: psycopg.Connection[Any], *, rollback: bool) -> None:
    """``DEALLOCATE ALL`` (after a ROLLBACK when ``rollback``), in one message: psycopg,
    seeing it, empties its record of the session's prepared statements as this
    empties agentbox's."""
    conn.execute("ROLLBACK;\nDEALLOCATE ALL" if rollback else "DEALLOCATE ALL")
    prepared(conn).reset()


@contextmanager
def transaction(conn: psycopg.Connection[Any], box_id: int) -> Iterator[Tx]:
    """A :class:`Tx`: COMMIT when the block ends, ROLLBACK when anything escapes it."""
    tx = Tx(conn, box_id)
    try:
        yield tx
        tx.commit()
    except BaseException:
        with suppress(psycopg.Error):
            tx.rollback()
        raise


def find_inbox(conn: psycopg.Connection[Any], name: str) -> int | None:
    row = conn.execute("SELECT id FROM inboxes WHERE name = %s", (name,)).fetchone()
    return None if row is None else int(row[0])


def create_inbox(conn: psycopg.Connection[Any], name: str) -> int:
    """The inbox of ``name``, made now if no process has made it yet."""
    row = conn.execute(
        """INSERT INTO inboxes (name, instance, created_at)
           VALUES (%s, %s, extract(epoch FROM now())::bigint)
           ON CONFLICT (name) DO NOTHING RETURNING id""",
        (name, secrets.token_hex(6))).fetchone()
    if row is not None:
        return int(row[0])
    found = find_inbox(conn, name)
    assert found is not None  # inboxes are never deleted
    return found
