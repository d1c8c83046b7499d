"""agentbox: the durable bookkeeping around an always-on AI agent.

For programs that embed it::

    import agentbox

    with agentbox.open(user="alice") as inbox:     # the same inbox the CLI uses
        inbox.ingest("github", "delivery-1", '{"action":"opened"}', now)

and for a handler written in Python, see :mod:`agentbox.handler`. Everything
heavy is imported on first use: ``agentbox ingest`` imports this module too.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentbox.ledger.store import Store

# The release, read by pyproject.toml too (its version is dynamic); CHANGELOG.md says
# what each one brought.
__version__ = "0.2.0"
__all__ = ["__version__", "open"]


def open(user: str | None = None, db: str | os.PathLike[str] | None = None) -> Store:
    """Open a user's inbox as the CLI would, returning the :class:`~agentbox.ledger.store.Store`.

    ``db`` is a SQLite file or a ``postgresql://`` URL; without it
    ``$AGENTBOX_DB``, then the ``database`` setting, then the user's own file
    under the data folder. ``user`` defaults to ``$AGENTBOX_USER``, then the
    login name. The store is a context manager; close it when done. Errors are
    :class:`agentbox.errors.AgentboxError` subclasses, never driver errors.
    """
    from agentbox.location import is_url, locate, open_store
    from agentbox.paths import resolve_user

    target = locate(db, user)
    return open_store(target, resolve_user(user) if is_url(target) else user or "")
