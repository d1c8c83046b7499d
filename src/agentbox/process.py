"""Running a user's command (a handler or a sender) as a supervised child.

The command is started from an argv list, never through a shell, as the
leader of a session and process group of its own, so that stopping it stops
everything it started. Its stdout is collected whole (up to a bound); its
stderr is relayed to agentbox's stderr line by line as it is written (each
line prefixed ``handler: `` or ``sender: ``, its control characters escaped),
and its last lines are kept for error messages. While it runs, an optional
heartbeat is called every few seconds (the run renews its lease there); a
heartbeat that returns False, or the timeout, stops the whole group: SIGTERM,
then SIGKILL once the grace period is over or the group is empty.

No orphans, however agentbox ends. Each agentbox process starts one small
watchdog (``python -S -I``, nothing imported beyond two built-in modules)
that holds the read end of a pipe whose write end only agentbox holds.
agentbox writes every child's group id into that pipe as soon as the child
has started, and crosses it off once the group is gone. When agentbox dies,
by SIGKILL included, the watchdog reads end-of-file and SIGKILLs every group
still on its list, so children, grandchildren and deeper are gone at once. A
process that leaves the group on purpose (``setsid``, daemonizing) is out of
reach; under systemd the unit's cgroup catches it when the service stops.

The child runs no Python between fork and exec (no ``preexec_fn``): so
CPython starts it with ``vfork``, not ``fork``, which copies no page tables
and starts a handler in a third of the time. The group is therefore noted by
agentbox after the start, not by the child before its exec; for the moment
in between, agentbox first notes the pipe the child's stdout will be (its
inode), and a watchdog left with such a note finds the processes holding
that pipe in ``/proc`` and kills their group.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from agentbox.errors import WorkFailed

MAX_STDOUT = 16 * 1024 * 1024
STDERR_TAIL = 4096  # bytes of the last stderr lines kept for an error message
LINE_MAX = 32 * 1024  # a longer stderr line is relayed in pieces of this size
STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
CUT = "…"  # marks a kept stderr line whose start was dropped

# The watchdog's whole program. Lines "+GROUP" and "-GROUP" add and remove a
# process group; "?PIPE" and "!PIPE" note and cross off a child being started,
# named by the inode of its stdout pipe. At end-of-file (agentbox is gone) every
# group left is killed, and so is the group of any process holding a pipe left.
# Terminal and stop signals are ignored: only agentbox's end ends it.
_WATCHDOG = """\
import posix, _signal
for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT):
    _signal.signal(s, _signal.SIG_IGN)
groups, pipes, rest = set(), set(), b""
while chunk := posix.read(0, 4096):
    *lines, rest = (rest + chunk).split(b"\\n")
    for line in lines:
        kind, what = line[:1], line[1:]
        if kind == b"+" or kind == b"-":
            (groups.add if kind == b"+" else groups.discard)(int(what))
        elif kind == b"?" or kind == b"!":
            (pipes.add if kind == b"?" else pipes.discard)(b"pipe:[" + what + b"]")
if pipes:
    for pid in posix.listdir(b"/proc"):
        try:
            if not pid.isdigit() or pipes.isdisjoint(
                    posix.readlink(b"/proc/" + pid + b"/fd/" + fd)
                    for fd in posix.listdir(b"/proc/" + pid + b"/fd")):
                continue
            stat = posix.open(b"/proc/" + pid + b"/stat", posix.O_RDONLY)
            groups.add(int(posix.read(stat, 4096).rsplit(b")", 1)[1].split()[2]))
            posix.close(stat)
        except (OSError, ValueError, IndexError):
            pass
for group in groups:
    try:
        if group > 1:
            posix.killpg(group, _signal.SIGKILL)
    except OSError:
        pass
"""


class CommandNotStarted(WorkFailed):
    """The command could not be started at all (missing, not executable)."""


def _spell(seconds: float) -> str:
    from agentbox.durations import format_duration

    return format_duration(int(seconds)) if seconds == int(seconds) else f"{seconds:g}s"


@dataclass(frozen=True)
class ChildResult:
    returncode: int | None  # None when it had to be stopped
    stdout: bytes
    stdout_truncated: bool
    stderr_tail: str  # the last lines, whole (only a single overlong line is cut)
    timed_out: bool
    stopped: bool  # the heartbeat asked for it to stop
    timeout: float  # the limit it ran under, for "timed out after 10m"
    killed: bool = False  # SIGKILLed at ``kill_after`` (see run_child), not by itself

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (self.timed_out or self.stopped)

    def describe(self) -> str:
        """Why a run of the command did not succeed, for an error column."""
        if self.timed_out:
            why = f"timed out after {_spell(self.timeout)}"
        elif self.stopped:
            why = "stopped"
        elif self.returncode is not None and self.returncode < 0:
            why = f"killed by signal {-self.returncode}"
        else:
            why = f"exited {self.returncode}"
        tail = self.stderr_tail.strip()
        return f"{why}: {tail}" if tail else why


# -- the watchdog -------------------------------------------------------------------


class _Watchdog:
    """The one watchdog of this agentbox process, started at the first child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd = -1
        atexit.register(self.close)

    def fd(self) -> int:
        """The pipe's write end, for a child to register its group on; (re)starts it."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            return self._fd

    def _start(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        import fcntl

        read, write = os.pipe()
        try:
            # Above 0-2, so a child's stdio set-up can never overwrite it before it writes.
            self._fd = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 3)
        finally:
            os.close(write)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-S", "-I", "-c", _WATCHDOG], stdin=read,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            os.close(self._fd)
            self._fd = -1
            raise CommandNotStarted(f"cannot start the watchdog ({sys.executable!r}): "
                                    f"{exc.strerror or exc}") from None
        finally:
            os.close(read)

    def close(self) -> None:
        """At a normal exit: end-of-file for the watchdog (no group is left), then reap it."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=1)

    def note(self, line: bytes) -> None:
        """One line of the watchdog's list (one write: a pipe keeps it whole)."""
        with self._lock, contextlib.suppress(OSError):
            os.write(self._fd, line)

    def forget(self, group: int) -> None:
        """The group is gone: the watchdog must never signal that id again."""
        self.note(b"-%d\n" % group)


WATCHDOG = _Watchdog()


# -- stderr, line by line -----------------------------------------------------------

_RELAY_LOCK = threading.Lock()


def _escaped(line: bytes) -> bytes:
    """A line shown as agentbox shows anyone else's words (see
    :func:`agentbox.spelling.printable`): no control character, C1 included, and no
    stray byte of a broken UTF-8 sequence goes out raw; printable UTF-8 is kept
    byte for byte."""
    from agentbox.spelling import printable

    return printable(line.decode("utf-8", "backslashreplace")).encode("utf-8")


class _StderrLines:
    """A child's stderr: each line relayed to ours as it comes, the last ones kept.

    Lines go out behind the label with control characters escaped, wherever our
    stderr goes: a terminal would act on an ESC, and journald or a log file would
    keep it for the terminal that later shows them (``tail -f``, ``less -R``).
    The kept tail holds the lines unescaped (the history records them so),
    whole, oldest dropped first, within ``keep`` bytes.
    """

    def __init__(self, label: str, keep: int, relay: IO[Any] | None) -> None:
        self._label = label.encode() + b": "
        self._keep = keep
        self._relay = relay
        self._partial = b""
        self._lines: deque[bytes] = deque()
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            self._line(line.removesuffix(b"\r"))
        while len(self._partial) > LINE_MAX:
            self._line(self._partial[:LINE_MAX])
            self._partial = self._partial[LINE_MAX:]

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, line: bytes) -> None:
        self._emit(line)
        self._lines.append(line)
        self._size += len(line) + 1
        while self._size > self._keep and len(self._lines) > 1:
            self._size -= len(self._lines.popleft()) + 1

    def _emit(self, line: bytes) -> None:
        if self._relay is None:
            return
        out = self._label + _escaped(line) + b"\n"
        with _RELAY_LOCK, contextlib.suppress(OSError, ValueError):
            self._relay.flush()  # what agentbox itself wrote comes first
            buffer = getattr(self._relay, "buffer", None)
            if buffer is not None:
                buffer.write(out)
                buffer.flush()
            else:
                self._relay.write(out.decode("utf-8", "replace"))
                self._relay.flush()

    def tail(self) -> str:
        """The kept lines; a last line longer than the bound alone keeps its end, marked.

        Text for people and for the history: a NUL byte (which PostgreSQL cannot
        store) shows as the replacement character, like a byte that does not decode.
        """
        data = b"\n".join(self._lines).replace(b"\x00", b"\xff")
        if len(data) <= self._keep:
            return data.decode("utf-8", "replace")
        end = data[-self._keep:].lstrip(bytes(range(0x80, 0xC0)))  # from a whole character
        return CUT + end.decode("utf-8", "replace")


def _drain_stderr(stream: IO[bytes], lines: _StderrLines) -> None:
    """Hand ``stream`` on as it arrives (not in 64 KiB blocks), to its end."""
    while chunk := os.read(stream.fileno(), 65536):
        lines.feed(chunk)
    lines.close()
    stream.close()


def _drain(stream: IO[bytes], keep: int, into: list[bytes], truncated: list[bool]) -> None:
    """Read ``stream`` to its end, keeping its first ``keep`` bytes.

    Once the head is full the rest is read and dropped, not joined and cut
    again per chunk: a flood of output costs a pass over it, not a copy of
    the whole bound for every 64 KiB.
    """
    size = 0
    while chunk := stream.read(65536):
        if size >= keep:
            truncated[0] = True
            continue
        into.append(chunk)
        size += len(chunk)
        if size > keep:
            into[:] = [b"".join(into)[:keep]]
            size = keep
            truncated[0] = True
    stream.close()


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        stream.close()


# -- waiting and stopping -----------------------------------------------------------


class _Leader:
    """The child, waited for without being reaped until its group has been dealt with.

    While the leader is an unreaped zombie its pid cannot be reused, so a
    signal to its group can only reach what the command started. A pidfd
    (Linux 5.3+) wakes us the moment it exits; elsewhere Popen.wait reaps it.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.group = proc.pid
        self._pidfd: int | None = None
        self._released = False
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(proc.pid)

    def exited(self, timeout: float | None) -> bool:
        """Whether the leader has exited, waiting up to ``timeout`` seconds for it."""
        if self._pidfd is None:
            try:
                self.proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        import select

        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.group, sig)

    def stop(self, grace: float) -> None:
        """SIGTERM the group; SIGKILL what is left once it is empty or ``grace`` is over."""
        deadline = time.monotonic() + grace
        self.signal_group(signal.SIGTERM)
        if self.exited(grace):
            while _group_alive(self.group) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.signal_group(signal.SIGKILL)
        self.exited(None)

    def release(self) -> int:
        """The group is dealt with: tell the watchdog, then reap the leader; its exit code."""
        if not self._released:
            self._released = True
            WATCHDOG.forget(self.group)
        returncode = self.proc.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return returncode


def _group_alive(group: int) -> bool:
    """Whether any live process (not a zombie) is still in ``group``; Linux's /proc only."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == b"%d" % group and fields[0] not in (b"Z", b"X"):
            return True
    return False


# -- running ------------------------------------------------------------------------


def run_child(argv: Sequence[str], stdin: bytes, env: Mapping[str, str], timeout: float,
              heartbeat: Callable[[], bool] | None = None, heartbeat_every: float = 10.0,
              max_stdout: int = MAX_STDOUT, label: str = "handler",
              kill_after: float | None = None) -> ChildResult:
    """Run ``argv`` to completion, its timeout, or until ``heartbeat`` returns False.

    ``label`` names the command on each stderr line relayed to ours.
    ``kill_after`` (seconds) SIGKILLs the whole group then, with no warning, as
    the kernel's OOM killer or a crash would: how a rehearsal injects a kill.
    The leader is not reaped before the signal, so it reaches nothing else. Anything
    that escapes while the child runs (a signal the caller turned into an
    exception, Ctrl-C) stops its whole group first, so nothing the command
    started outlives the caller giving up on it.
    """
    # The child's stdout is a pipe made here, so that the watchdog can be told which
    # pipe the child holds before it exists (see the module's docstring).
    out_read, out_write = os.pipe()
    pipe = b"%d" % os.fstat(out_write).st_ino
    WATCHDOG.fd()  # started (or restarted) before the child, never after it
    WATCHDOG.note(b"?" + pipe + b"\n")
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=out_write,
                                stderr=subprocess.PIPE, env=dict(env),
                                start_new_session=True)
    except OSError as exc:
        os.close(out_read)
        WATCHDOG.note(b"!" + pipe + b"\n")
        raise CommandNotStarted(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    finally:
        os.close(out_write)
    WATCHDOG.note(b"+%d\n!%s\n" % (proc.pid, pipe))
    proc.stdout = open(out_read, "rb")  # noqa: SIM115 - closed by _drain
    leader = _Leader(proc)
    try:
        return _supervise(leader, stdin, timeout, heartbeat, heartbeat_every, max_stdout,
                          label, kill_after)
    except BaseException:
        leader.stop(STOP_GRACE)
        raise
    finally:
        leader.release()


def _supervise(leader: _Leader, stdin: bytes, timeout: float,
               heartbeat: Callable[[], bool] | None, heartbeat_every: float,
               max_stdout: int, label: str, kill_after: float | None) -> ChildResult:
    proc = leader.proc
    assert proc.stdin and proc.stdout and proc.stderr
    out: list[bytes] = []
    out_cut = [False]
    err = _StderrLines(label, STDERR_TAIL, sys.stderr)
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, max_stdout, out, out_cut),
                         daemon=True),
        threading.Thread(target=_drain_stderr, args=(proc.stderr, err), daemon=True),
    ]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    deadline = started + timeout
    kill_at = None if kill_after is None else started + kill_after
    timed_out = stopped = killed = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        wait = min(remaining, heartbeat_every)
        if kill_at is not None:
            wait = max(0.0, min(wait, kill_at - time.monotonic()))
        if leader.exited(wait):
            break
        if kill_at is not None and time.monotonic() >= kill_at:
            leader.signal_group(signal.SIGKILL)
            leader.exited(None)
            killed = True
            break
        if heartbeat is not None and not heartbeat():
            stopped = True
            break
    if timed_out or stopped:
        leader.stop(STOP_GRACE)
    elif not killed:
        # The leader exited; anything it left running in its group goes too.
        leader.signal_group(signal.SIGKILL)
    for thread in threads:
        thread.join(timeout=STOP_GRACE)
    returncode = leader.release()
    return ChildResult(None if (timed_out or stopped) else returncode, b"".join(out),
                       out_cut[0], err.tail(), timed_out, stopped, timeout, killed)
