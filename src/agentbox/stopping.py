"""SIGTERM and SIGINT as a request to stop cleanly, shared by runs, watchers and dispatchers.

A signal never cuts a transaction in half: it is noted, and acted on at the
next safe point, except inside an :meth:`Stop.interruptible` block (a
handler or sender running, a watcher asleep), where it raises
:class:`Interrupted` at once, so that the command being waited for is
stopped (its whole process group) and the stop is not delayed by it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived inside an interruptible block."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Stop:
    """Whether a stop was asked for, and by which signal."""

    signum: int | None = None
    _raising: bool = field(default=False, repr=False)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGTERM).name

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Catch SIGTERM and SIGINT for the duration (main thread only: elsewhere, no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, _frame: object) -> None:
            self.signum = signum
            if self._raising:
                self._raising = False
                raise Interrupted(signum)

        previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Inside, a stop raises :class:`Interrupted` at once (also one asked for before)."""
        self._raising = True  # first: a signal from here on raises
        if self.signum is not None:
            self._raising = False
            raise Interrupted(self.signum)
        try:
            yield
        finally:
            self._raising = False
