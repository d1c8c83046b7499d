"""Waking a watcher when another session changes an inbox: LISTEN/NOTIFY.

Every change to an inbox's rows, or to its lease, notifies the schema's
channel with the inbox's id when it commits (see schema.NOTIFIED). A waiter
LISTENs on a connection of its own and wakes for a notification about its
inbox that came from any session but its store's: a worker is not woken by
its own claims and renewals. Notifications are queued on the listening
connection from the moment it LISTENs, so a change made between two waits
wakes the next one at once. A connection lost while waiting is opened again,
and that wait reports a change: what happened meanwhile is unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from agentbox.backends.postgres.db import session
from agentbox.backends.postgres.url import Target


class Listener:
    """A LISTENing connection: which inboxes other sessions changed, and when."""

    def __init__(self, target: Target, ignore_pid: Callable[[], int]) -> None:
        self.target = target
        self.ignore_pid = ignore_pid
        self.conn = self._listen()

    def _listen(self) -> psycopg.Connection[Any]:
        conn = session(self.target)
        conn.execute(f"LISTEN {self.target.schema}")
        return conn

    def changed(self, timeout: float) -> set[int] | None:
        """The inbox ids other sessions notified within ``timeout`` seconds (once one
        came, the rest already queued); None when the connection was lost and opened
        again."""
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            while True:
                left = deadline - time.monotonic()
                found = self._ids(self.conn.notifies(timeout=max(left, 0.0), stop_after=1))
                if found:
                    return found | self._ids(self.conn.notifies(timeout=0))
                if left <= 0:
                    return found
        except psycopg.OperationalError:
            self.conn.close()
            self.conn = self._listen()
            return None

    def _ids(self, notifies: Iterable[psycopg.Notify]) -> set[int]:
        mine = self.ignore_pid()
        return {int(n.payload) for n in notifies if n.pid != mine and n.payload.isdigit()}

    def close(self) -> None:
        self.conn.close()


class InboxWaiter:
    """The :class:`~agentbox.ledger.engine.Waiter` of one inbox, blind to its store's own writes.

    ``box_id`` finds the inbox's row id: None while the inbox has not been made
    (then a notification about any new inbox is looked at).
    """

    def __init__(self, target: Target, own: psycopg.Connection[Any],
                 box_id: Callable[[], int | None]) -> None:
        self.listener = Listener(target, lambda: own.info.backend_pid)
        self.box_id = box_id

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            changed = self.listener.changed(deadline - time.monotonic())
            if changed is None:
                return True
            mine = self.box_id()
            if mine is not None and mine in changed:
                return True
            if time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        self.listener.close()


class SchemaWaiter:
    """The :class:`~agentbox.ledger.inboxes.InboxesWaiter` of every inbox in one schema.

    ``names`` maps inbox ids to users (new inboxes included), ``own`` is the
    connection whose writes are not news.
    """

    def __init__(self, target: Target, own: psycopg.Connection[Any],
                 names: Callable[[set[int]], set[str]]) -> None:
        self.listener = Listener(target, lambda: own.info.backend_pid)
        self.names = names

    def wait(self, timeout: float) -> set[str] | None:
        changed = self.listener.changed(timeout)
        return None if changed is None else self.names(changed)

    def close(self) -> None:
        self.listener.close()
