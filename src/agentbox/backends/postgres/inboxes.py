"""Every inbox of one schema: what `run --watch --all-users` serves on PostgreSQL.

One connection serves them all (the pool works one inbox at a time), and the
next work of every inbox asked about comes from one query, so a pool costs
the server one session whatever the number of inboxes, and any number of
pools, on any number of hosts, may share the schema (each inbox's lease
keeps them apart).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import psycopg

from agentbox.backends.postgres import db
from agentbox.backends.postgres.engine import PostgresEngine
from agentbox.backends.postgres.url import parse
from agentbox.backends.postgres.wake import SchemaWaiter
from agentbox.errors import AgentboxError, DatabaseError, NoInbox
from agentbox.ledger.runs import next_work_of
from agentbox.ledger.store import Store
from agentbox.paths import check_user


class PostgresInboxes:
    """The :class:`~agentbox.ledger.inboxes.Inboxes` of one PostgreSQL schema."""

    def __init__(self, url: str) -> None:
        self.target = parse(url)
        self.location = self.target.location
        try:
            self.conn: psycopg.Connection[Any] = db.connect(self.target, create=False)
        except NoInbox:  # no schema yet: nothing to serve or list until a first write makes it
            self.conn = db.session(self.target)
        self._stores: dict[str, Store] = {}
        self._failed: dict[str, str] = {}

    def _read(self, query: str, params: db.Params = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(query, params).fetchall()
        except psycopg.errors.UndefinedTable:
            return []  # the schema has no tables yet: no inbox
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    def users(self) -> list[str]:
        return [str(r[0]) for r in self._read("SELECT name FROM inboxes ORDER BY name")]

    def store(self, user: str) -> Store:
        opened = self._stores.get(user)
        if opened is None:
            box = self._box_of(user)
            if box is None:
                raise DatabaseError(f"{self.location}: no inbox for user {user!r}")
            opened = Store(PostgresEngine.sharing(self.conn, self.target, box))
            self._stores[user] = opened
        return opened

    def _box_of(self, user: str) -> int | None:
        found = self._read("SELECT id FROM inboxes WHERE name = %s", (check_user(user),))
        return int(found[0][0]) if found else None

    def next_work(self, now: int, users: Collection[str]) -> dict[str, int]:
        """One read for every inbox asked about, whatever their number."""
        try:
            names = {int(i): str(n) for i, n in self._read(
                "SELECT id, name FROM inboxes WHERE name = ANY(%s)", (sorted(users),))}
            due = next_work_of(PostgresEngine.sharing(self.conn, self.target, 0).reader(0),
                               names, now)
        except AgentboxError as exc:
            self._failed.update(dict.fromkeys(users, str(exc)))
            return {}
        return {names[box]: at for box, at in due.items()}

    def failures(self) -> dict[str, str]:
        failed, self._failed = self._failed, {}
        return failed

    def _names(self, ids: set[int]) -> set[str]:
        """The users of these inbox ids (an inbox made since is looked up too)."""
        return {str(r[0]) for r in self._read("SELECT name FROM inboxes WHERE id = ANY(%s)",
                                              (sorted(ids),))}

    def waiter(self) -> SchemaWaiter:
        return SchemaWaiter(self.target, self.conn, self._names)

    def close(self) -> None:
        self._stores.clear()
        self.conn.close()
