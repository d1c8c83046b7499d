"""procrastinate, as a user would set it up: `procrastinate --app=procrastinate_app.app worker`.

``PEER_DB`` is a libpq connection string whose options put a schema of the
bench's own first on the search path; the bench makes one per side with
:func:`make`. The connections keep the server's ``synchronous_commit = on``.
"""

from __future__ import annotations

import os
from typing import Any

from procrastinate import App, PsycopgConnector
from stamps import note


def make(conninfo: str) -> tuple[App, Any]:
    """An app on ``conninfo`` and its one task, ``stamp(key, payload)``."""
    app = App(connector=PsycopgConnector(conninfo=conninfo))

    @app.task(name="stamp")
    def stamp(key: str, payload: str) -> None:
        note(key)

    return app, stamp


def __getattr__(name: str) -> Any:
    """``procrastinate_app.app``, as the CLI loads it: the app on ``PEER_DB``."""
    if name == "app":
        return make(os.environ["PEER_DB"])[0]
    raise AttributeError(name)
