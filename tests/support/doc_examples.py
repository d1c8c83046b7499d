"""The runner of the shell examples in README.md and docs/*.md (tests/docs runs them).

The conventions (docs/development.md, "Examples are tests"):

- A ```console block is a terminal session. A line starting with ``$ `` is a
  command (continued on lines starting with ``> ``); the lines after it, up to
  the next command, are its expected output, stdout and stderr together. A
  last line ``[N]`` says the command exits N; without it, it must exit 0.
  ``...`` inside a line matches any text; a line of only ``...`` matches any
  number of lines. Trailing spaces and trailing blank lines do not count.
- The console commands of a page run one after another in one bash process,
  so variables, exports and ``cd`` carry over, as at a prompt; each command's
  stdin is /dev/null.
- A ```sh or ```bash block is a script of its own, run with ``bash -eu``: it
  must exit 0. The files it makes stay; its variables do not.
- Directives, in HTML comments on the lines right before a fence:
  ``<!-- not run: REASON -->`` skips the block (the reason is required);
  ``<!-- file: NAME -->`` writes the block to NAME instead of running it;
  ``<!-- clock: +DURATION -->`` sets AGENTBOX_NOW to the page's start time plus
  DURATION for this block and the ones after it.
- Every fence names its language, so no shell example goes unnoticed.

Each page runs in a directory of its own, with a fresh AGENTBOX_HOME, user
alice, AGENTBOX_NOW pinned to 2026-12-01 09:00:00 UTC, TZ=UTC and an 80-column console;
the blocks of one page share that state, in order.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentbox.durations import parse_duration

ROOT = Path(__file__).resolve().parents[2]  # the repository
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
START = 1_796_115_600  # 2026-12-01 09:00:00 UTC
SHELL = ("console", "sh", "bash")
NOT_SHELL = ("json", "toml", "python", "text", "ini", "nginx", "yaml", "sql")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*([a-z ]+):\s*(.*?)\s*-->\s*$")
EXIT = re.compile(r"^\[(\d+)\]$")
TIMEOUT = 120


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, counting from 1
    language: str
    text: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{_shown(self.page)}:{self.line}"


def _shown(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


@dataclass(frozen=True)
class Command:
    line: int
    text: str
    expected: list[str]
    status: int


def blocks(page: Path) -> Iterator[Block]:
    """The fenced blocks of a page, each with the directives just above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    n = 0
    while n < len(lines):
        opened = FENCE.match(lines[n])
        if not opened:
            n += 1
            continue
        indent, language = opened.groups()
        directives: dict[str, str] = {}
        above = n - 1
        while above >= 0 and (found := DIRECTIVE.match(lines[above])):
            directives[found.group(1)] = found.group(2)
            above -= 1
        opening = n + 1
        body: list[str] = []
        n += 1
        while n < len(lines) and not FENCE.match(lines[n]):
            body.append(lines[n][len(indent):] if lines[n].startswith(indent) else lines[n])
            n += 1
        if n == len(lines):
            raise AssertionError(f"{page.name}:{opening}: the block is never closed")
        yield Block(page, opening, language, "\n".join(body) + "\n", directives)
        n += 1


def commands(block: Block) -> list[Command]:
    """The commands of a console block, with the output each must print."""
    found: list[Command] = []
    lines = block.text.splitlines()
    n = 0
    while n < len(lines):
        if not lines[n].startswith("$ "):
            raise AssertionError(f"{block.where}: output before any '$ ' command: "
                                 f"{lines[n]!r}")
        start = n
        text = [lines[n][2:]]
        n += 1
        while n < len(lines) and lines[n].startswith("> "):
            text.append(lines[n][2:])
            n += 1
        expected: list[str] = []
        while n < len(lines) and not lines[n].startswith("$ "):
            expected.append(lines[n].rstrip())
            n += 1
        while expected and not expected[-1]:
            expected.pop()
        status = 0
        if expected and (code := EXIT.match(expected[-1])):
            status = int(code.group(1))
            expected.pop()
        found.append(Command(block.line + 1 + start, "\n".join(text), expected, status))
    return found


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line; `...` in a line is any text, a line of `...` any lines."""
    parts = [r"(?:[^\n]*\n)*?" if line.strip() == "..." else
             ".*".join(re.escape(piece) for piece in line.split("...")) + r"\n"
             for line in expected]
    return re.fullmatch("".join(parts), "".join(f"{line}\n" for line in actual)) is not None


class Shell:
    """One bash process for a page's console commands, so that variables,
    exports and `cd` carry from one command to the next, as at a prompt."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.marker = f"--- end of command {os.getpid()} ---"
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, command: str) -> tuple[int, list[str]]:
        """The command's exit status and output; its stdin is /dev/null."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{{\n{command}\n}} </dev/null\n"
                              f"printf '\\n%s %s\\n' '{self.marker}' \"$?\"\n")
        self.proc.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise AssertionError(f"`{command}` ran longer than {TIMEOUT}s") from None
            if line is None:
                raise AssertionError(f"the shell ended during `{command}`:\n"
                                     + "\n".join(output))
            if line.startswith(self.marker):
                return int(line.rsplit(" ", 1)[1]), _trimmed(output)
            output.append(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _trimmed(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


class Session:
    """One page's examples: a working directory, a home and a pinned clock.

    ``env`` adds to the environment (a database to run them against); ``same``
    says whether a command's output is what the page shows.
    """

    def __init__(self, tmp: Path, env: Mapping[str, str] | None = None,
                 same: Callable[[list[str], list[str]], bool] = matches) -> None:
        self.cwd = tmp / "work"
        self.cwd.mkdir(parents=True)
        tools = tmp / "bin"
        tools.mkdir()
        shim = tools / "agentbox"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agentbox "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
        # python3 is the interpreter agentbox is installed in, as it is for a reader
        # who installed it: a handler written in Python imports agentbox.handler.
        python = tools / "python3"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(python.stat().st_mode | stat.S_IXUSR)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("AGENTBOX_") and k not in ("COLUMNS", "LINES")}
        self.env.update(PATH=f"{tools}{os.pathsep}{os.environ['PATH']}",
                        AGENTBOX_HOME=str(tmp / "home"), AGENTBOX_USER="alice",
                        AGENTBOX_NOW=str(START), COLUMNS="80", LC_ALL="C.UTF-8", TZ="UTC",
                        HOME=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"),
                        PYTHONIOENCODING="utf-8")
        self.env.update(env or {})
        self.same = same
        self.shell = Shell(self.cwd, self.env)

    def script(self, text: str) -> tuple[int, list[str]]:
        """A sh block: a script of its own under bash -eu, in the page's directory."""
        done = subprocess.run(["bash", "-euc", text], cwd=self.cwd, env=self.env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        return done.returncode, _trimmed(done.stdout.splitlines())

    def play(self, block: Block) -> None:
        directives = dict(block.directives)
        if "not run" in directives:
            assert directives["not run"], f"{block.where}: 'not run' needs a reason"
            return
        if "clock" in directives:
            offset = directives.pop("clock")
            assert offset.startswith("+"), f"{block.where}: clock takes +DURATION"
            now = START + parse_duration(offset[1:])
            self.env["AGENTBOX_NOW"] = str(now)
            self.shell.run(f"export AGENTBOX_NOW={now}")
        if "file" in directives:
            name = directives.pop("file")
            assert name and "/" not in name, f"{block.where}: file needs a plain name"
            (self.cwd / name).write_text(block.text, encoding="utf-8")
            return
        assert not directives, f"{block.where}: unknown directive {sorted(directives)}"
        if block.language == "console":
            for command in commands(block):
                status, output = self.shell.run(command.text)
                where = f"{_shown(block.page)}:{command.line}"
                shown = "\n".join(output)
                if status != command.status:
                    pytest.fail(f"{where}: `{command.text}` exited {status}, the doc says "
                                f"{command.status}; it printed:\n{shown}", pytrace=False)
                if not self.same(command.expected, output):
                    pytest.fail(f"{where}: `{command.text}` printed:\n{shown}\n"
                                "--- the doc shows:\n" + "\n".join(command.expected),
                                pytrace=False)
        elif block.language in ("sh", "bash"):
            assert not re.search(r"^\$ ", block.text, re.M), (
                f"{block.where}: '$ ' prompts belong in a console block")
            status, output = self.script(block.text)
            shown = "\n".join(output)
            if status != 0:
                pytest.fail(f"{block.where}: the script exited {status}:\n{shown}",
                            pytrace=False)


def play_page(page: Path, tmp: Path, env: Mapping[str, str] | None = None,
              same: Callable[[list[str], list[str]], bool] = matches) -> None:
    """Run every example of ``page``, in order; the first that differs fails."""
    session = Session(tmp, env, same)
    try:
        for block in blocks(page):
            assert block.language in SHELL + NOT_SHELL, (
                f"{block.where}: a fence must name its language, one of "
                f"{', '.join(SHELL + NOT_SHELL)} (not {block.language!r})")
            if block.language in SHELL or "file" in block.directives:
                session.play(block)
    finally:
        session.shell.close()

