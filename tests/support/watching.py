"""Long-running agentbox processes (`--watch`) for tests, their output kept in files.

A watcher's stdout and stderr go to files rather than pipes, so a test can
read what it has said so far while it keeps running, and a chatty watcher
never blocks on a full pipe.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.processes import wait_for


@dataclass
class Watcher:
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def printed(self) -> str:
        return self.out.read_text()

    def said(self) -> str:
        return self.err.read_text()

    def wait_said(self, text: str, timeout: float = 60) -> None:
        """Wait until the watcher has said ``text`` on stderr (failing early if it exits)."""
        def said() -> bool:
            if text in self.said():
                return True
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode} before saying {text!r}: "
                                     f"{self.said()}")
            return False

        wait_for(said, f"the watcher to say {text!r}", timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signal it and wait for it; its exit code."""
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=60)


def launch(folder: Path, name: str, argv: list[str], env: dict[str, str]) -> Watcher:
    """`python -m agentbox ARGV` in the background, its output in ``folder/name.out|err``."""
    out, err = folder / f"{name}.out", folder / f"{name}.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "agentbox", *argv], env=env,
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)
    return Watcher(proc, out, err)
