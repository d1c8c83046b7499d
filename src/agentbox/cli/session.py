"""What one command invocation knows: whose inbox, where it lives, which settings.

It also decides what opening the inbox may do. A command that only reads
never creates an inbox: where there is none it says so on stderr, naming
the inboxes that exist, and answers from an empty view, as for a new inbox.
A command that acts on an existing file (backup, prune) refuses instead.
Every other command creates the inbox on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentbox import clock, paths

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from agentbox.config import Settings
    from agentbox.ledger.inboxes import Inboxes
    from agentbox.ledger.store import Store


# Commands (as typed after `agentbox`) that only read the inbox.
READ_ONLY = frozenset({
    "status", "dead", "dead list", "dead show", "events", "events list", "events show",
    "outbox", "outbox list", "schedule list", "approve list", "inboxes", "metrics", "doctor",
    "export", "rehearse",
    "state", "state show", "state history", "steps", "steps list", "steps show",
})
# Commands that act on an existing inbox and have nothing to do without one.
NEEDS_INBOX = frozenset({"backup", "prune"})


class Session:
    def __init__(self, user_flag: str | None, db_flag: str | None) -> None:
        self.user_flag = user_flag
        self.db_flag = db_flag
        self.command = ""  # the command being run, e.g. "dead show" (see app.session)
        self._store: Store | None = None

    @cached_property
    def user(self) -> str:
        return paths.resolve_user(self.user_flag)

    @cached_property
    def chosen_db(self) -> str | None:
        """The inbox named by ``--db``, ``$AGENTBOX_DB`` or the ``database`` setting, if any
        (None: the user's own file)."""
        from agentbox.location import named

        return named(self.db_flag, self.user_flag)

    @cached_property
    def db_target(self) -> str:
        """Where the inbox lives (see :func:`agentbox.location.locate`); its folder is made
        only by a command that may create the inbox (see :meth:`store`)."""
        from agentbox.location import locate

        return locate(self.db_flag, self.user_flag, make_folder=False)

    def settings(self, flags: Mapping[str, Any] | None = None) -> Settings:
        from agentbox import config

        return config.resolve(paths.config_path(), self.user, flags)

    def zone(self) -> ZoneInfo:
        """The zone a time written without one is read in: config, else TZ, else the system's."""
        from agentbox.calendar import local_zone

        return local_zone(self.settings().timezone)

    def store(self) -> Store:
        """The inbox, opened as this command may: see the module docstring."""
        if self._store is None:
            from agentbox.errors import BadInput, NoInbox
            from agentbox.location import empty_view

            reads = self.command in READ_ONLY
            try:
                self._store = self.store_factory(
                    create=not reads and self.command not in NEEDS_INBOX)()
            except NoInbox:
                if not reads:
                    raise BadInput(self.no_inbox()) from None
                from agentbox import render

                render.notice(self.no_inbox())
                self._store = empty_view(self.db_target)
        return self._store

    def store_factory(self, busy_timeout: float | None = None,
                      create: bool = True) -> Callable[[], Store]:
        """A callable that opens a new store on this inbox each time: one per server thread.

        ``busy_timeout`` (seconds) bounds each write's wait for the inbox's lock,
        for a caller that must answer sooner than the store's own wait. Without
        ``create`` a missing inbox is :class:`~agentbox.errors.NoInbox`.
        """
        from agentbox.location import is_url, open_store

        target = self.db_target
        # A file is the inbox itself: a --db file needs no usable user name.
        user = self.user if is_url(target) else self.user_or_none() or ""
        # The user's own folders are made with a new inbox; a --db folder must exist.
        folders = create and not self.chosen_db
        return lambda: open_store(target, user, busy_timeout=busy_timeout,
                                  make_folders=folders, create=create)

    def no_inbox(self) -> str:
        """What to say when the inbox does not exist: whose, and which ones do."""
        from agentbox.location import is_url

        if self.chosen_db and not is_url(self.chosen_db):
            return f"no inbox at {self.db_target}"
        inboxes = self.inboxes()
        try:
            users = inboxes.users()
        finally:
            inboxes.close()
        return (f"no inbox for user {self.user!r} "
                f"(inboxes: {', '.join(users) if users else 'none yet'})")

    def inboxes(self) -> Inboxes:
        """Every user's inbox where this one's live (see
        :func:`agentbox.location.locate_inboxes`)."""
        from agentbox.location import locate_inboxes, open_inboxes

        return open_inboxes(locate_inboxes(self.db_flag))

    def user_or_none(self) -> str | None:
        """The user, or None where only an unusable login name stands behind --db."""
        from agentbox.errors import BadInput

        try:
            return self.user
        except BadInput:
            return None

    def now(self) -> int:
        return clock.now()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
