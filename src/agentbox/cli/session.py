"""What one command invocation knows: whose inbox, which file, which settings."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox import clock, paths

if TYPE_CHECKING:
    from agentbox.config import Settings
    from agentbox.engine.store import SqliteStore


class Session:
    def __init__(self, user_flag: str | None, db_flag: Path | None) -> None:
        self.user_flag = user_flag
        self.db_flag = db_flag
        self._store: SqliteStore | None = None

    @cached_property
    def user(self) -> str:
        return paths.resolve_user(self.user_flag)

    @cached_property
    def db_path(self) -> Path:
        """The inbox file; the user name is checked before any folder is made."""
        if self.db_flag is not None:
            return self.db_flag
        path = paths.inbox_path(self.user)
        paths.private_dir(path.parent)
        return path

    def settings(self, flags: Mapping[str, Any] | None = None) -> Settings:
        from agentbox import config

        return config.resolve(paths.config_path(), self.user, flags)

    def store(self) -> SqliteStore:
        if self._store is None:
            from agentbox.engine.store import SqliteStore

            # The user's own folders are made by db_path; a --db folder must exist.
            self._store = SqliteStore(self.db_path, make_folders=False)
        return self._store

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
