"""Running a user's command (a handler or a sender) as a supervised child.

The command is started from an argv list, never through a shell, in a
process group of its own so that stopping it stops everything it started.
Its stdout is collected whole (up to a bound) and its stderr kept as a
bounded tail for error messages. While it runs, an optional heartbeat is
called every few seconds (the run renews its lease there); a heartbeat that
returns False, or the timeout, stops the whole group: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from agentbox.errors import WorkFailed

MAX_STDOUT = 16 * 1024 * 1024
STDERR_TAIL = 4096
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


class CommandNotStarted(WorkFailed):
    """The command could not be started at all (missing, not executable)."""


@dataclass(frozen=True)
class ChildResult:
    returncode: int | None  # None when it had to be stopped
    stdout: bytes
    stdout_truncated: bool
    stderr_tail: str
    timed_out: bool
    stopped: bool  # the heartbeat asked for it to stop

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.stopped)

    def describe(self) -> str:
        """Why a run of the command did not succeed, for an error column."""
        if self.timed_out:
            why = "timed out"
        elif self.stopped:
            why = "stopped"
        elif self.returncode is not None and self.returncode < 0:
            why = f"killed by signal {-self.returncode}"
        else:
            why = f"exited {self.returncode}"
        tail = self.stderr_tail.strip()
        return f"{why}: {tail}" if tail else why


def _die_with_parent() -> None:
    """In the child: get SIGKILL if agentbox dies, so no orphan acts on stale work."""
    os.setsid()
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)


def _drain(stream: IO[bytes], keep: int, tail: bool, into: list[bytes],
           truncated: list[bool]) -> None:
    """Read ``stream`` to its end, keeping its first (or, with ``tail``, last) ``keep`` bytes.

    Once the head is full the rest is read and dropped, not joined and cut
    again per chunk: a flood of output costs a pass over it, not a copy of
    the whole bound for every 64 KiB.
    """
    size = 0
    while chunk := stream.read(65536):
        if size >= keep and not tail:
            truncated[0] = True
            continue
        into.append(chunk)
        size += len(chunk)
        if size > keep:
            joined = b"".join(into)
            into[:] = [joined[-keep:] if tail else joined[:keep]]
            size = keep
            truncated[0] = True
    stream.close()


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.close()


def stop_group(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM the child's process group, then SIGKILL it after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(argv: Sequence[str], stdin: bytes, env: Mapping[str, str], timeout: float,
              heartbeat: Callable[[], bool] | None = None, heartbeat_every: float = 10.0,
              max_stdout: int = MAX_STDOUT) -> ChildResult:
    """Run ``argv`` to completion, its timeout, or until ``heartbeat`` returns False.

    Anything that escapes while the child runs (a signal the caller turned into
    an exception, Ctrl-C) stops its whole group first, so nothing the command
    started outlives the caller giving up on it.
    """
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(env),
                                preexec_fn=_die_with_parent)
    except OSError as exc:
        raise CommandNotStarted(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    try:
        return _supervise(proc, stdin, timeout, heartbeat, heartbeat_every, max_stdout)
    except BaseException:
        stop_group(proc)
        raise


def _supervise(proc: subprocess.Popen[bytes], stdin: bytes, timeout: float,
               heartbeat: Callable[[], bool] | None, heartbeat_every: float,
               max_stdout: int) -> ChildResult:
    assert proc.stdin and proc.stdout and proc.stderr
    out: list[bytes] = []
    err: list[bytes] = []
    out_cut, err_cut = [False], [False]
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, max_stdout, False, out, out_cut),
                         daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, STDERR_TAIL, True, err, err_cut),
                         daemon=True),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    timed_out = stopped = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        try:
            proc.wait(timeout=min(remaining, heartbeat_every))
            break
        except subprocess.TimeoutExpired:
            if heartbeat is not None and not heartbeat():
                stopped = True
                break
    if timed_out or stopped:
        stop_group(proc)
    else:
        # The leader exited; anything it left running in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=STOP_GRACE)
    tail = b"".join(err).decode("utf-8", "replace")
    return ChildResult(None if (timed_out or stopped) else proc.returncode, b"".join(out),
                       out_cut[0], tail[-STDERR_TAIL:], timed_out, stopped)
