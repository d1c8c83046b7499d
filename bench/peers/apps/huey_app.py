"""huey on SQLite, as a user would set it up: `huey_consumer huey_app.huey` runs its worker.

``fsync=True`` is huey's word for ``PRAGMA synchronous = FULL`` and WAL is its
default journal, so every enqueue is as durable as agentbox's ingest.
``PEER_DB`` names the consumer's file; the bench makes one per side with
:func:`make`.
"""

from __future__ import annotations

import os
from typing import Any

from huey import SqliteHuey
from stamps import note


def make(filename: str) -> tuple[SqliteHuey, Any]:
    """A huey on ``filename`` and its one task, ``stamp(key, payload)``."""
    app = SqliteHuey("bench", filename=filename, fsync=True, journal_mode="wal")

    @app.task(name="stamp")
    def stamp(key: str, payload: str) -> None:
        note(key)

    return app, stamp


def __getattr__(name: str) -> Any:
    """``huey_app.huey``, as the consumer loads it: the huey of the file ``PEER_DB`` names."""
    if name == "huey":
        return make(os.environ["PEER_DB"])[0]
    raise AttributeError(name)
