"""What one command invocation knows: whose inbox, where it lives, which settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from agentbox import clock, paths

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from agentbox.config import Settings
    from agentbox.store import Store


class Session:
    def __init__(self, user_flag: str | None, db_flag: str | None) -> None:
        self.user_flag = user_flag
        self.db_flag = db_flag
        self._store: Store | None = None

    @cached_property
    def user(self) -> str:
        return paths.resolve_user(self.user_flag)

    @cached_property
    def db_target(self) -> str:
        """Where the inbox lives (see :func:`agentbox.store.locate`)."""
        from agentbox.store import locate

        return locate(self.db_flag, self.user_flag)

    def settings(self, flags: Mapping[str, Any] | None = None) -> Settings:
        from agentbox import config

        return config.resolve(paths.config_path(), self.user, flags)

    def zone(self) -> ZoneInfo:
        """The zone a time written without one is read in: config, else TZ, else the system's."""
        from agentbox.calendar import local_zone

        return local_zone(self.settings().timezone)

    def store(self) -> Store:
        if self._store is None:
            self._store = self.store_factory()()
        return self._store

    def store_factory(self, busy_timeout: float | None = None) -> Callable[[], Store]:
        """A callable that opens a new store on this inbox each time: one per server thread.

        ``busy_timeout`` (seconds) bounds each write's wait for the inbox's lock,
        for a caller that must answer sooner than the store's own wait.
        """
        from agentbox.store import is_url, open_store

        target = self.db_target
        # A file is the inbox itself: a --db file needs no usable user name.
        user = self.user if is_url(target) else self.user_or_none() or ""
        # The user's own folders are made by db_target; a --db folder must exist.
        return lambda: open_store(target, user, busy_timeout=busy_timeout)

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
