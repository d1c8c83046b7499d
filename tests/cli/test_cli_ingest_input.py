"""What ingest reads, and how much of it it holds: piped bodies, deep nesting, big signed streams.

Real processes throughout: the rules are about stdin as a shell hands it over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbox.jsonutil import MAX_DEPTH
from support.clock import T0
from support.processes import proc_env
from support.store import users_at


def nested(levels: int) -> str:
    """An object ``levels`` deep as JSON text: {"a": {"a": ... {} ...}}.

    Spelled out, not dumped: the test's own encoder would give up first.
    """
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


def start(home: Path, *argv: str, stdin: Any, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "agentbox", *argv], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=proc_env(home, AGENTBOX_NOW=str(T0), **env))


def with_pipe(home: Path, data: bytes, *argv: str, close: bool = True) -> tuple[int, str, str]:
    """Run ingest with ``data`` already waiting in a pipe on its stdin (no race with a writer)."""
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    if close:
        os.close(write_end)
    try:
        proc = start(home, *argv, stdin=read_end)
        os.close(read_end)
        out, err = proc.communicate(timeout=60)
    finally:
        if not close:
            os.close(write_end)
    return proc.returncode, out.decode(), err.decode()


# --- a piped body is never dropped ------------------------------------------------

@pytest.mark.slow
def test_piped_body_without_payload_flag_is_refused_not_dropped(
        home: Path, rows: Any, place: str) -> None:
    code, _, err = with_pipe(home, b'{"text": "x"}\n', "ingest", "chat", "c")
    assert code == 2, err
    assert "--payload-file -" in err and "--payload '{}'" in err
    assert users_at(place) == [] or rows("SELECT COUNT(*) FROM events") == [(0,)]
    # the same body, named, is stored: and a redelivery of it is a duplicate, not a conflict
    for outcome in ("stored", "duplicate"):
        code, out, err = with_pipe(home, b'{"text": "x"}\n', "ingest", "chat", "c", "-f", "-",
                                   "--json")
        assert code == 0, err
        assert json.loads(out)["outcome"] == outcome
    assert rows("SELECT payload FROM events") == [('{"text":"x"}',)]


@pytest.mark.slow
def test_payload_dash_points_to_payload_file_and_reads_nothing(
        home: Path, place: str) -> None:
    """`-` names stdin for every other option; for --payload it is a slip, not JSON."""
    code, out, err = with_pipe(home, b'{"text": "x"}\n', "ingest", "chat", "c", "--payload", "-")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "use --payload-file -" in err
    assert users_at(place) == []


@pytest.mark.slow
def test_pipe_still_open_with_data_is_refused(home: Path) -> None:
    code, _, err = with_pipe(home, b'{"text": "x"}', "ingest", "chat", "c", close=False)
    assert code == 2, err


@pytest.mark.slow
@pytest.mark.parametrize("stdin", ["devnull", "empty pipe"])
def test_nothing_on_stdin_stores_an_empty_payload(home: Path,
                                                 stdin: str, rows: Any) -> None:
    if stdin == "devnull":
        proc = start(home, "ingest", "chat", "c", stdin=subprocess.DEVNULL)
        code, err = proc.wait(timeout=60), proc.communicate()[1].decode()
    else:
        code, _, err = with_pipe(home, b"", "ingest", "chat", "c")
    assert code == 0, err
    assert rows("SELECT payload FROM events") == [("{}",)]


@pytest.mark.slow
def test_a_shell_loop_keeps_its_input(home: Path,
                                      tmp_path: Path, rows: Any) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("a\nb\nc\n")
    agentbox = f'"{sys.executable}" -m agentbox'
    env = proc_env(home, AGENTBOX_NOW=str(T0))
    # Without a payload named, a call refuses while the loop's input has lines left, and
    # eats none of them: the loop sees every line. The last call finds nothing waiting.
    loop = (f'while read id; do {agentbox} ingest chat "$id" >/dev/null; echo "$id:$?"; '
            f'done < "{ids}"')
    done = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["a:2", "b:2", "c:0"], done.stderr
    assert rows("SELECT source_id FROM events ORDER BY id") == [("c",)]
    # With --payload '{}' each line is one event.
    loop = (f'while read id; do {agentbox} ingest chat "$id" --payload "{{}}"; '
            f'done < "{ids}"')
    done = subprocess.run(["bash", "-c", loop], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert rows("SELECT source_id FROM events ORDER BY id") == [("c",), ("a",), ("b",)]


# --- nesting is bounded on every way in ----------------------------------------------

def test_nesting_bound_on_single_ingest(cli: Callable[..., Any], rows: Any) -> None:
    ok = cli("ingest", "deep", "ok", "--payload", nested(MAX_DEPTH), now=T0)
    assert ok.code == 0, ok.err
    for levels in (MAX_DEPTH + 1, 980):
        refused = cli("ingest", "deep", str(levels), "--payload", nested(levels),
                      now=T0)
        assert refused.code == 65
        assert f"nested more than {MAX_DEPTH} levels" in refused.err
    deep_list: Any = []
    for _ in range(MAX_DEPTH):
        deep_list = [deep_list]
    refused = cli("ingest", "deep", "list", "--payload", json.dumps({"l": deep_list}), now=T0)
    assert refused.code == 65, refused.err
    assert rows("SELECT source_id FROM events") == [("ok",)]


def test_nesting_bound_on_jsonl_lines(cli: Callable[..., Any], rows: Any) -> None:
    lines = [f'{{"source": "deep", "source_id": "{n}", "payload": {nested(n)}}}'
             for n in (MAX_DEPTH, MAX_DEPTH + 1, 980)]
    result = cli("ingest", "--jsonl", "-", "--json", stdin="\n".join(lines) + "\n", now=T0)
    assert result.code == 65
    outcomes = [line["outcome"] for line in json.loads(result.out)["lines"]]
    assert outcomes == ["stored", "bad", "bad"]
    assert rows("SELECT source_id FROM events") == [(str(MAX_DEPTH),)]


@pytest.mark.slow
def test_the_deepest_payload_allowed_runs_dies_and_shows(
        home: Path, agentbox_proc: Callable[..., Any]) -> None:
    """What the bound is for: everything stored can be handed on and shown again."""
    env = {"AGENTBOX_NOW": str(T0)}
    assert agentbox_proc("config", "set", "max_attempts", "1").returncode == 0
    body = nested(MAX_DEPTH)
    done = agentbox_proc("ingest", "deep", "1", "--payload", body, env=env)
    assert done.returncode == 0, done.stderr
    handler = "import json,sys; json.load(sys.stdin); sys.exit(1)"
    done = agentbox_proc("run", "--", sys.executable, "-c", handler, env=env)
    assert done.returncode == 1 and "RecursionError" not in done.stderr, done.stderr
    for argv in (["dead"], ["dead", "--json"], ["dead", "show", "1"], ["dead", "show", "1",
                                                                        "--json"]):
        done = agentbox_proc(*argv, env=env)
        assert done.returncode == 0, (argv, done.stderr)
    shown = json.loads(agentbox_proc("dead", "--json").stdout)[0]["payload"]
    assert json.dumps(shown, separators=(",", ":")) == nested(MAX_DEPTH)


@pytest.mark.slow
def test_a_handler_answer_with_a_too_deep_timer_payload_fails_the_run(
        agentbox_proc: Callable[..., Any]) -> None:
    env = {"AGENTBOX_NOW": str(T0)}
    assert agentbox_proc("ingest", "chat", "1", "--payload", "{}", env=env).returncode == 0
    answer = f'{{"timers": [{{"name": "later", "in": "1h", "payload": {nested(MAX_DEPTH + 1)}}}]}}'

    handler = f"import sys; sys.stdin.read(); print({answer!r})"
    done = agentbox_proc("run", "--", sys.executable, "-c", handler, env=env)
    assert done.returncode == 1
    assert f"nested more than {MAX_DEPTH} levels" in done.stderr
    assert json.loads(agentbox_proc("schedule", "list", "--json", env=env).stdout) == []


# --- a signed stream is checked in flat memory -------------------------------------

def _peak_rss_mb(pid: int) -> float:
    """The process's own peak resident memory so far (VmHWM, which only grows).

    Not ``wait4``'s ``ru_maxrss``: Linux starts a child's count at its parent's size when it
    execs, so that figure is the test runner's memory whenever the runner is the bigger.
    """
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024  # kB


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_signed_jsonl_stream_is_checked_without_holding_it(home: Path, place: str) -> None:
    size = 128 * 1024 * 1024
    line = json.dumps({"source": "bulk", "source_id": "x", "payload": {"pad": "p" * 900}})
    block = ((line + "\n") * (1024 * 1024 // (len(line) + 1))).encode()
    secret = "s3cret"
    proc = start(home, "ingest", "--jsonl", "-", "--signature", "sha256=" + "0" * 64,
                 "--secret-env", "HOOK_SECRET", stdin=subprocess.PIPE, HOOK_SECRET=secret)
    peak: list[float] = []

    def feed() -> None:
        assert proc.stdin is not None
        sent = 0
        while sent < size:
            proc.stdin.write(block)
            sent += len(block)
        proc.stdin.flush()
        peak.append(_peak_rss_mb(proc.pid))  # the whole stream has been read but the last pipeful
        proc.stdin.close()

    # stderr and stdout are small; drain them after the feed
    writer = threading.Thread(target=feed)
    writer.start()
    writer.join(timeout=240)
    code = proc.wait(timeout=60)
    peak_mb = peak[0]
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert code == 77, err
    assert "does not match" in err
    assert peak_mb < 80, f"peak RSS {peak_mb:.0f} MB for a {size >> 20} MB stream"
    assert users_at(place) == []
