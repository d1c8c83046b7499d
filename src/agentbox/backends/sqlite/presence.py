"""Who has an inbox file open: a lock file beside it that every open store holds.

Each :class:`~agentbox.backends.sqlite.engine.SqliteEngine` holds a shared
``flock`` on ``.INBOX.lock`` (as ``config.toml`` has ``.config.toml.lock``)
for as long as it is open, so ``restore`` (which needs the exclusive lock) can
tell whether any agentbox process works on the inbox: a ``serve``, a watcher or
a pool holds it for its whole life and is refused with
:class:`~agentbox.errors.Busy`; a one-shot command holds it for a moment, and
one that starts while a restore swaps the file waits for the swap and then
opens the new file. The kernel drops a lock with its process, SIGKILL
included, so a crash never leaves the inbox looking busy. The lock file is
separate from the inbox so that it survives the swap: a process that reopens
the restored file keeps holding it. It is never removed: a lock file unlinked
while held would let the next opener lock a new one that a restore does not see.
"""

from __future__ import annotations

import fcntl
import os
import time

from agentbox.errors import Busy

PAUSE = 0.01  # seconds between tries while a restore holds the inbox


def lock_path(location: str) -> str:
    """The lock file of the inbox file ``location``: hidden, beside it."""
    folder, name = os.path.split(location)
    return os.path.join(folder, f".{name}.lock")


def _open(location: str) -> int:
    return os.open(lock_path(location), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def hold(location: str, wait: float) -> int | None:
    """The shared lock, taken within ``wait`` seconds (a restore swapping the file holds
    it exclusively for a moment); its descriptor, to close with the store. None where
    no lock file can be made (a read-only folder): such an inbox cannot be restored."""
    try:
        fd = _open(location)
    except OSError:
        return None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise Busy(f"{location}: a restore is replacing the inbox; "
                           "try again") from None
            time.sleep(PAUSE)
        except OSError:  # a file system without flock: nobody can be told apart
            return fd


def take_alone(location: str) -> int:
    """The exclusive lock, at once, or Busy: no other agentbox process has the inbox
    open. Its descriptor; closing it lets the waiting openers in."""
    fd = _open(location)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(f"{location}: an agentbox process works on this inbox (a serve, "
                   "a run or dispatch --watch, a pool, or a command now); stop it and "
                   "try again") from None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
