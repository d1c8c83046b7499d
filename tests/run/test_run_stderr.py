"""The handler's stderr reaches agentbox's stderr line by line while it runs.

Each line goes out behind ``handler: `` with its control characters and the
bytes of broken UTF-8 escaped, as agentbox shows anyone else's words, whether
our stderr is a terminal, a pipe (journald) or a file; printable UTF-8 passes
byte for byte. A handler flooding stdout and stderr at once cannot wedge the run.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from support.clock import T0
from support.processes import finish_proc, read_line
from support.store import event_state

pytestmark = pytest.mark.slow


def test_a_line_is_relayed_before_the_handler_exits(cli, start_run, tmp_path):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    go = tmp_path / "go"
    handler = ("import os, sys, time\n"
               "sys.stdin.read()\n"
               "print('thinking about m1', file=sys.stderr, flush=True)\n"
               f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
               "print('done thinking', file=sys.stderr)\n"
               "print('{}')\n")
    worker = start_run("--", sys.executable, "-c", handler, now=T0)
    try:
        assert read_line(worker.stderr, "the first line") == "handler: thinking about m1\n"
        assert worker.poll() is None  # the handler is still waiting for `go`
        go.touch()
        code, out, err = finish_proc(worker)
    finally:
        go.touch()
    assert code == 0, err
    assert err == "handler: done thinking\n"
    assert out.startswith("generation 1: 1 event(s) (1) done")


def _run_bytes(handler: str, **popen: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AGENTBOX_NOW": str(T0)}
    return subprocess.Popen([sys.executable, "-m", "agentbox", "run", "--", sys.executable,
                             "-c", handler], env=env, stdout=subprocess.PIPE, **popen)


NOISY = ("import sys\n"
         "sys.stdin.read()\n"
         r"sys.stderr.buffer.write(b'caf\xc3\xa9 \xff\xfe raw\n\x1b[31mred\x1b[0m\tend\r\n')" "\n"
         r"sys.stderr.buffer.write(b'c1 \xc2\x9b2J bidi \xe2\x80\xae bell\x07 back\rover\n')"
         "\n"
         r"sys.stderr.buffer.write(b'half \xe2\x82 nul \x00 del \x7f\n')" "\n"
         "sys.stderr.buffer.write(b'no newline at the end')\n"
         "print('{}')\n")
# As agentbox shows any other people's words: C0, DEL, C1 and bidi controls, and the
# bytes of broken UTF-8, spelled out; a line's own \r\n ending is an ending.
ESCAPED = [b"handler: caf\xc3\xa9 \\xff\\xfe raw",
           b"handler: \\x1b[31mred\\x1b[0m\\tend",
           b"handler: c1 \\x9b2J bidi \\u202e bell\\x07 back\\rover",
           b"handler: half \\xe2\\x82 nul \\x00 del \\x7f",
           b"handler: no newline at the end"]


def test_control_characters_are_escaped_in_a_pipe_too(cli, home):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    proc = _run_bytes(NOISY, stderr=subprocess.PIPE)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err.split(b"\n") == [*ESCAPED, b""]


def test_control_characters_are_escaped_on_a_terminal(cli, home):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    leader, follower = pty.openpty()
    try:
        proc = _run_bytes(NOISY, stderr=follower)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: every writer of the terminal has gone
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    lines = seen.replace(b"\r\n", b"\n").split(b"\n")  # the terminal adds its own \r
    assert lines[:len(ESCAPED)] == ESCAPED


def test_the_recorded_tail_keeps_the_exact_text(cli, open_inbox):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    failing = ("import sys\n"
               "sys.stdin.read()\n"
               r"sys.stderr.buffer.write(b'\x1b[31mred\x1b[0m gone\n')" "\n"
               "sys.exit(1)\n")
    result = cli("run", "--json", "--", sys.executable, "-c", failing, now=T0)
    assert result.code == 1
    relayed, said = result.err.splitlines()
    assert relayed == "handler: \\x1b[31mred\\x1b[0m gone"
    assert said == "agentbox: error: handler exited 1: \\x1b[31mred\\x1b[0m gone"
    [event] = open_inbox().events()
    assert event.error == "handler exited 1: \x1b[31mred\x1b[0m gone"


def test_flooding_stdout_and_stderr_at_once_cannot_wedge_the_run(cli, open_inbox):
    assert cli("ingest", "chat", "m1", now=T0).code == 0
    lines = 20_000
    flood = ("import json, sys\n"
             "sys.stdin.read()\n"
             f"for n in range({lines}):\n"
             "    sys.stdout.write(' ' * 512)\n"  # whitespace before the answer is valid JSON
             "    sys.stderr.write(f'line {n} ' + 'e' * 300 + '\\n')\n"
             "print(json.dumps({'messages': ['flooded']}))\n")
    result = cli("run", "--timeout", "120", "--", sys.executable, "-c", flood, now=T0)
    assert result.code == 0, result.err[-500:]
    # every line whole and in order, nothing cut or interleaved mid-line
    assert result.err.splitlines() == [f"handler: line {n} " + "e" * 300
                                       for n in range(lines)]
    assert event_state(open_inbox(), "m1") == ("done", 1)
    assert [m.body for m in open_inbox().outbox(("held",))] == ["flooded"]
