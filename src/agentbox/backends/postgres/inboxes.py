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

from agentbox.backends.postgres import db, runs
from agentbox.backends.postgres.store import PostgresStore
from agentbox.backends.postgres.url import parse
from agentbox.backends.postgres.wake import SchemaWaiter
from agentbox.errors import AgentboxError, DatabaseError
from agentbox.paths import check_user


class PostgresInboxes:
    """The :class:`~agentbox.store.Inboxes` of one PostgreSQL schema."""

    def __init__(self, url: str) -> None:
        self.target = parse(url)
        self.location = self.target.location
        self.conn: psycopg.Connection[Any] = db.connect(self.target)
        self._stores: dict[str, PostgresStore] = {}
        self._failed: dict[str, str] = {}

    def _read(self, query: str, params: db.Params = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise db.translate(exc, self.location) from None

    def users(self) -> list[str]:
        return [str(r[0]) for r in self._read("SELECT name FROM inboxes ORDER BY name")]

    def store(self, user: str) -> PostgresStore:
        opened = self._stores.get(user)
        if opened is None:
            found = self._read("SELECT id FROM inboxes WHERE name = %s", (check_user(user),))
            if not found:
                raise DatabaseError(f"{self.location}: no inbox for user {user!r}")
            opened = PostgresStore.sharing(self.conn, self.target, user, int(found[0][0]))
            self._stores[user] = opened
        return opened

    def next_work(self, now: int, users: Collection[str]) -> dict[str, int]:
        try:
            return runs.next_work_of(self.conn, sorted(users), now)
        except psycopg.Error as exc:
            why = str(db.translate(exc, self.location))
        except AgentboxError as exc:
            why = str(exc)
        self._failed.update(dict.fromkeys(users, why))
        return {}

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
