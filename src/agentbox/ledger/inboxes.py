"""Every user's inbox at one location, as a process serving them all sees it.

A backend implements :class:`Inboxes` its own way (a folder of SQLite files,
or the rows of one PostgreSQL schema); each inbox it hands out is a ledger
:class:`~agentbox.ledger.store.Store`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from agentbox.ledger.store import Store


class InboxesWaiter(Protocol):
    """How a worker serving every inbox sleeps: until any of them changes."""

    def wait(self, timeout: float) -> set[str] | None:
        """Sleep until inboxes change, or ``timeout`` seconds pass.

        Returns the users whose inboxes changed (new inboxes included; empty
        after a timeout), or None when any inbox may have changed (the
        backend lost track, say), so the caller looks at all of them.
        """
        ...

    def close(self) -> None:
        """Stop watching."""
        ...


class Inboxes(Protocol):
    """Every user's inbox at one location: what `run --watch --all-users` serves."""

    #: The folder of inbox files, or the PostgreSQL URL without its password.
    location: str

    def users(self) -> list[str]:
        """Every user with an inbox here, sorted."""
        ...

    def store(self, user: str) -> Store:
        """The store of one existing inbox, opened once and kept until :meth:`close`."""
        ...

    def next_work(self, now: int, users: Collection[str]) -> dict[str, int]:
        """:meth:`Store.next_work` of each of ``users`` that has anything scheduled.

        Inboxes that cannot be read are left out; see :meth:`failures`.
        """
        ...

    def failures(self) -> dict[str, str]:
        """Inboxes that could not be opened or read since the last call, with the reason."""
        ...

    def waiter(self) -> InboxesWaiter:
        """An :class:`InboxesWaiter` on every inbox here, new ones included."""
        ...

    def close(self) -> None:
        """Close every store opened through this object."""
        ...
