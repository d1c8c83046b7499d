"""What every peer's task does: note the time it started, under its key, and return.

The worker processes of the peer figures run these apps with ``PEER_STAMPS``
naming a file; each task appends one line, ``KEY TIME``, as agentbox's
handler appends its own start time. The lines are short appends to a file
opened for appending, so a worker running tasks in several threads keeps
them whole.
"""

from __future__ import annotations

import os
import time

STAMPS = os.environ.get("PEER_STAMPS", os.devnull)


def note(key: str) -> None:
    """The task: its start time first, then the line."""
    at = time.time()
    with open(STAMPS, "a", encoding="utf-8") as out:
        out.write(f"{key} {at:.6f}\n")
