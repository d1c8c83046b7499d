"""Waking a watcher when another process writes an SQLite inbox.

Three ways were measured (``bench/wakeup.py``): polling ``PRAGMA data_version``
every 50 ms, polling the size and time of the ``-wal`` file, and inotify. Both
pollers are late by half their period on average and wake twenty times a second
for nothing; inotify reports the write of a WAL frame within a fraction of a
millisecond and costs nothing while nothing happens. So:

- A *doorbell* watches the inbox's folder: inotify, called through ctypes (no
  dependency), where the system has it; elsewhere, or when the per-user limit
  of inotify instances is reached, a poll every :data:`POLL` seconds instead.
- A ring is only a hint. SQLite writes a commit's WAL frames before it
  publishes the commit, so a ring is confirmed by ``PRAGMA data_version`` on
  the store's own connection, which moves only when *another* connection
  committed. The commit shows once the writer's sync of the log is done, a
  fraction of a millisecond to a few later, and nothing rings then; so the
  check is repeated after 0.1 ms, then at pauses a quarter longer each time
  (up to :data:`LONGEST_RECHECK`, for up to :data:`SETTLE` seconds), which sees
  a commit within about a quarter of its sync's time of its showing, for a
  dozen reads of a counter. A process's own writes ring too, and are then
  ignored.
- Every :data:`SAFETY` seconds the versions are read without a ring, so a lost
  notification costs a delay, never a missed change.
"""

from __future__ import annotations

import contextlib
import os
import select
import sqlite3
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path

POLL = 0.05      # seconds between looks when there is no inotify
SETTLE = 1.0     # seconds a ring is followed up while its commit is not visible yet
SAFETY = 2.0     # seconds between looks without a ring
FIRST_RECHECK = 0.0001
RECHECK_GROWTH = 1.25  # each pause this much longer than the one before
LONGEST_RECHECK = 0.1

# inotify(7)
_IN_MODIFY, _IN_MOVED_TO, _IN_CREATE, _IN_Q_OVERFLOW = 0x2, 0x80, 0x100, 0x4000
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows


class _Inotify:
    """Names of the files written, created or moved into one folder."""

    def __init__(self, folder: Path) -> None:
        """OSError when the system gives none: :func:`doorbell` then polls, whatever the
        reason (so no errno is read)."""
        import ctypes

        libc = ctypes.CDLL(None)
        fd = int(libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        if fd < 0:
            raise OSError("inotify_init1 failed")
        if libc.inotify_add_watch(fd, os.fsencode(folder),
                                  _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO) < 0:
            os.close(fd)
            raise OSError(f"cannot watch {folder}")
        self.fd = fd

    def ring(self, timeout: float) -> set[str] | None:
        """Wait up to ``timeout`` seconds; the names written since, or None after an overflow."""
        ready, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
        if not ready:
            return set()
        data = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.fd, 65536):
                data += chunk
        names: set[str] = set()
        offset = 0
        while offset + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            if mask & _IN_Q_OVERFLOW:
                return None
            names.add(os.fsdecode(data[offset:offset + length].rstrip(b"\0")))
            offset += length
        return names

    def close(self) -> None:
        """Closing twice is harmless: a second ``os.close`` of the number could close
        another file that was given it in between."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Polling:
    """No notifications to be had: every ``period`` seconds, 'anything may have changed'."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.look_at = time.monotonic()

    def ring(self, timeout: float) -> set[str] | None:
        pause = min(timeout, self.look_at - time.monotonic())
        if pause > 0:
            time.sleep(pause)
        if time.monotonic() < self.look_at:
            return set()
        self.look_at = time.monotonic() + self.period
        return None

    def close(self) -> None:
        pass


def doorbell(folder: Path, period: float = POLL) -> _Inotify | _Polling:
    """inotify on ``folder`` where it can be had, else polling every ``period`` seconds."""
    try:
        return _Inotify(folder)
    except (OSError, AttributeError):  # not Linux, no such folder, or out of instances
        return _Polling(period)


class Changes:
    """Which of the inboxes in one folder other connections have changed.

    ``owner`` maps a file name in the folder to the inbox it belongs to (None:
    not an inbox file); ``scan`` lists the inboxes there now; ``version`` reads
    an inbox's ``PRAGMA data_version`` on the connection whose own writes are
    to be ignored (None: not opened, so anything there counts as new).
    """

    def __init__(self, folder: Path, owner: Callable[[str], str | None],
                 scan: Callable[[], Iterable[str]], version: Callable[[str], int | None],
                 period: float = POLL) -> None:
        self.bell = doorbell(folder, period)
        self.owner, self.scan, self.version = owner, scan, version
        self.seen: dict[str, int | None] = {name: version(name) for name in scan()}
        # inbox -> (when to look next, how long to wait after that, when to give up)
        self.suspects: dict[str, tuple[float, float, float]] = {}
        self.safety_at = time.monotonic() + SAFETY

    @property
    def notified(self) -> bool:
        """Whether the system notifies this process of writes (else it polls)."""
        return not isinstance(self.bell, _Polling)

    def wait(self, timeout: float) -> set[str]:
        """Sleep until some inboxes changed or ``timeout`` seconds pass; the changed ones.

        The doorbell is read at least once, even with no time to wait: a caller too
        busy to sleep still learns which inboxes changed meanwhile.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            now = time.monotonic()
            changed = self._confirm(now)
            if changed:
                return changed
            step = min(deadline, self.safety_at,
                       *(at for at, _, _ in self.suspects.values())) - now
            rung = self.bell.ring(max(step, 0.0))
            now = time.monotonic()
            if rung is None or now >= self.safety_at:
                # No word of which file changed, or time for the safety look: every inbox
                # there is looked at once.
                self.safety_at = now + SAFETY
                for name in self.scan():
                    self.suspects.setdefault(name, (now, 0.0, now))
            for file in rung or ():
                inbox = self.owner(file)
                if inbox is not None:
                    self.suspects[inbox] = (now, FIRST_RECHECK, now + SETTLE)
            if now >= deadline:
                return self._confirm(now)

    def _confirm(self, now: float) -> set[str]:
        changed: set[str] = set()
        for name, (at, pause, give_up) in list(self.suspects.items()):
            if at > now:
                continue
            version = self.version(name)
            if version is None or name not in self.seen or version != self.seen[name]:
                self.seen[name] = version
                changed.add(name)
                del self.suspects[name]
            elif now >= give_up:
                del self.suspects[name]
            else:
                self.suspects[name] = (now + pause, min(pause * RECHECK_GROWTH, LONGEST_RECHECK),
                                       give_up)
        return changed

    def close(self) -> None:
        self.bell.close()


def data_version(conn: sqlite3.Connection) -> int:
    """Moves whenever another connection commits to the file of ``conn``."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


class InboxWaiter:
    """The :class:`~agentbox.ledger.engine.Waiter` of one inbox file, blind to its store's
    own writes."""

    def __init__(self, conn: Callable[[], sqlite3.Connection], location: str) -> None:
        """``conn`` gives the store's connection as it is now (a store reopens a
        replaced file: the waiter then reads the new one)."""
        path = Path(location)
        mine = path.name

        def owner(file: str) -> str | None:
            return mine if file == mine or file.startswith(mine + "-") else None

        self.location = location
        self.changes = Changes(path.parent, owner, lambda: [mine],
                               lambda _name: data_version(conn()))

    def wait(self, timeout: float) -> bool:
        from agentbox.backends.sqlite.db import translate

        try:
            return bool(self.changes.wait(timeout))
        except sqlite3.Error as exc:
            raise translate(exc, self.location) from None

    def close(self) -> None:
        self.changes.close()
