"""Hostile input: each refusal has its exit code, one stderr line, and leaves the files alone."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbox.location import is_url
from support.clock import T0
from support.fixtures import Cli
from support.store import users_at

BAD_NAMES = {
    "slash": "a/b",
    "dotdot": "..",
    "dotdot-path": "../../etc/passwd",
    "leading-dot": ".hidden",
    "nul": "ali\x00ce",
    "space": "al ice",
    "too-long": "a" * 200,
    "empty": "",
    "non-ascii": "alicé",
    "newline": "alice\n",
}
COMMANDS = [
    ["ingest", "s", "1", "--payload", "{}"],
    ["ingest", "--jsonl", "-"],
    ["status", "--json"],
    ["dead", "--json"],
    ["replay", "--all"],
    ["config", "set", "max_batch", "5"],
    ["config", "show"],
]


@pytest.fixture
def seeded(cli: Cli, home: Path, inbox_path: Path) -> Path:
    """alice's inbox with two events in it; returns the inbox path."""
    assert cli("ingest", "s", "1", "--payload", '{"n": 1}', now=T0).code == 0
    assert cli("ingest", "s", "2", now=T0).code == 0
    return inbox_path


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_bad_user_flag_is_65_and_touches_nothing(cli: Cli, home: Path, seeded: Path,
                                                 tree_snapshot: Any, one_error: Any,
                                                 name: str) -> None:
    before = tree_snapshot(home)
    for argv in COMMANDS:
        result = cli("--user", name, *argv, now=T0, stdin='{"source":"s","source_id":"9"}\n')
        assert result.code == 65, argv
        assert "invalid user name" in one_error(result.err)
        assert result.out == ""
        assert tree_snapshot(home) == before, argv


@pytest.mark.parametrize("name", [n for n in BAD_NAMES.values() if "\x00" not in n and n],
                         ids=[k for k, n in BAD_NAMES.items() if "\x00" not in n and n])
def test_bad_agentbox_user_is_65_before_any_folder_is_made(cli: Cli, home: Path,
                                                          one_error: Any, name: str,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("AGENTBOX_USER", name)
    for argv in COMMANDS:
        result = cli(*argv, now=T0, stdin="")
        assert result.code == 65, argv
        one_error(result.err)
    assert not home.exists()
    assert not (home.parent / "etc").exists()


def test_names_at_the_edges_are_accepted(cli: Cli, place: str) -> None:
    for name in ("a", "a" * 64, "A.b_c-9", "-dash", "_x", "x.."):
        assert cli("--user", name, "ingest", "s", "1", now=T0).code == 0, name
    assert cli("--user", "a" * 65, "ingest", "s", "1", now=T0).code == 65
    assert len(users_at(place)) == 6


@pytest.mark.slow
def test_bad_user_names_in_real_processes(agentbox_proc: Any, home: Path) -> None:
    for name in ("a/b", "..", ".hidden", "al ice", "a" * 200, ""):
        done = agentbox_proc("--user", name, "ingest", "s", "1")
        assert done.returncode == 65, (name, done.stderr)
        assert done.stderr.startswith("agentbox: error: invalid user name")
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert done.stdout == ""
    assert not home.exists()


def test_sql_metacharacters_are_stored_and_found_verbatim(cli: Cli, rows: Any,
                                                         place: str) -> None:
    source = "'; DROP TABLE events; --"
    source_id = "1' OR '1'='1"
    payload = {"'; DROP TABLE events; --": "x\"); DELETE FROM events; --", "%_": "\\"}
    result = cli("ingest", source, source_id, "--payload", json.dumps(payload), "--json",
                 now=T0)
    assert result.code == 0
    assert json.loads(result.out)["outcome"] == "stored"
    assert cli("ingest", "s", "1' OR '1'='1", now=T0).code == 0  # a different source
    again = cli("ingest", source, source_id, "--payload", json.dumps(payload), "--json", now=T0)
    assert json.loads(again.out)["outcome"] == "duplicate"
    found = rows("SELECT source, source_id, payload FROM events WHERE source = :source "
                 "AND source_id = :source_id", source=source, source_id=source_id)
    assert len(found) == 1 and json.loads(found[0][2]) == payload
    assert rows("SELECT COUNT(*) FROM events") == [(2,)]
    assert {"events", "history", "inboxes"} <= set(tables(place))  # no table was dropped
    stream = json.dumps({"source": source, "source_id": "2; --", "payload": payload})
    assert cli("ingest", "--jsonl", "-", stdin=stream, now=T0).code == 0
    assert rows("SELECT source_id FROM events WHERE source = :source ORDER BY id",
                source=source) == [(source_id,), ("2; --",)]


def tables(place: str) -> list[str]:
    """The tables of the test's inbox file, or of its PostgreSQL schema."""
    from support.store import place_snapshot

    if is_url(place):
        return list(place_snapshot(place) or {})  # type: ignore[call-overload]
    conn = sqlite3.connect(Path(place) / "alice.sqlite3")
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")]
    finally:
        conn.close()


@pytest.mark.parametrize(("argv", "stdin", "code"), [
    (["ingest", "s", "x", "--payload", '{"a": NaN}'], None, 65),
    (["ingest", "s", "x", "--payload", '{"a": Infinity}'], None, 65),
    (["ingest", "s", "x", "--payload", "[]"], None, 65),
    (["ingest", "s", "x", "--payload", '{"a": [1, 2'], None, 65),
    (["ingest", "s", "x", "-f", "-"], b'{"a": "\xc3\x28"}', 65),
    (["ingest", "s", "x", "-f", "-"], b"\xef\xbb\xbf{}", 65),  # a BOM is not JSON
    (["ingest", "s", "x", "-f", "-"], b'{"a": "' + b"x" * (256 * 1024) + b'"}', 65),
    (["ingest", "s", "1", "--payload", '{"n": 2}'], None, 3),
])
def test_hostile_payloads_leave_the_inbox_untouched(cli: Cli, home: Path, seeded: Path,
                                                    tree_snapshot: Any, one_error: Any,
                                                    argv: list[str], stdin: bytes | None,
                                                    code: int) -> None:
    before = tree_snapshot(home)
    # a conflict is answered, and recorded in the event's history; nothing else is
    result = cli(*argv, stdin=stdin, now=T0)
    assert result.code == code
    if code == 3:
        assert result.err == ""
        from support.sqlite import sqlite_store

        with sqlite_store(seeded) as store:
            event = store.find("s", "1")
            assert event is not None and event.payload == '{"n":1}'
        return
    one_error(result.err)
    assert tree_snapshot(home) == before


def _real_inbox(path: Path, events: int = 3) -> None:
    from support.sqlite import sqlite_store

    with sqlite_store(path) as store:
        store.ingest_many((("s", str(i), '{"pad":"' + "x" * 300 + '"}') for i in range(events)),
                          T0)


def _refused_everywhere(cli: Cli, one_error: Any, needle: str,
                        flags: tuple[str, ...] = ()) -> None:
    for argv in (["ingest", "s", "new"], ["ingest", "s", "0"], ["status", "--json"],
                 ["dead", "--json"], ["replay", "--all"]):
        result = cli(*flags, *argv, now=T0)
        assert result.code == 1, (argv, result)
        assert needle in one_error(result.err)
        assert result.out == ""


@pytest.mark.parametrize("content", [
    os.urandom(4096),
    b"SQLite format 3\x00" + b"\xff" * 4080,
    b"not a database at all\n",
], ids=["random", "header-then-garbage", "text"])
def test_a_garbage_inbox_is_refused_and_kept(cli: Cli, home: Path, inbox_path: Path,
                                             tree_snapshot: Any, one_error: Any,
                                             content: bytes) -> None:
    inbox_path.parent.mkdir(parents=True)
    inbox_path.write_bytes(content)
    before = tree_snapshot(home)
    _refused_everywhere(cli, one_error, str(inbox_path))
    assert tree_snapshot(home) == before


@pytest.mark.parametrize("keep", [0.02, 0.1, 0.5, 0.9])
def test_a_truncated_inbox_is_refused_and_kept(cli: Cli, home: Path, inbox_path: Path,
                                               tree_snapshot: Any, one_error: Any,
                                               keep: float) -> None:
    _real_inbox(inbox_path, events=300)
    data = inbox_path.read_bytes()
    inbox_path.write_bytes(data[:int(len(data) * keep)])
    before = tree_snapshot(home)
    _refused_everywhere(cli, one_error, "corrupt")
    assert tree_snapshot(home) == before


def test_a_newer_schema_is_refused_and_kept(cli: Cli, home: Path, inbox_path: Path,
                                            tree_snapshot: Any, one_error: Any) -> None:
    from agentbox.backends.sqlite.schema import SCHEMA_VERSION

    _real_inbox(inbox_path)
    conn = sqlite3.connect(inbox_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 4}")
    conn.close()
    before = tree_snapshot(home)
    _refused_everywhere(cli, one_error, "newer agentbox")
    assert f"schema {SCHEMA_VERSION + 4}" in cli("status").err
    assert tree_snapshot(home) == before


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_foreign_sqlite_file_is_refused_and_kept(cli: Cli, tmp_path: Path, tree_snapshot: Any,
                                                   one_error: Any, journal: str) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    db = folder / "app.db"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
    conn.execute("INSERT INTO events (what) VALUES ('theirs')")
    conn.commit()
    conn.close()
    before = tree_snapshot(folder)
    _refused_everywhere(cli, one_error, "not an agentbox database", ("--db", str(db)))
    assert tree_snapshot(folder) == before


def test_a_folder_where_the_inbox_should_be(cli: Cli, inbox_path: Path, one_error: Any) -> None:
    inbox_path.mkdir(parents=True)
    result = cli("ingest", "s", "1", now=T0)
    assert result.code == 1
    assert "directory" in one_error(result.err)


# -- a read-only inbox, as a user the file modes apply to --------------------------------

def _python_path() -> str:
    """Where agentbox and its dependencies are importable from, for another interpreter."""
    import platformdirs
    import rich
    import tomli_w
    import typer

    import agentbox

    roots = {str(Path(m.__file__).resolve().parents[1])  # type: ignore[arg-type]
             for m in (agentbox, typer, rich, platformdirs, tomli_w)}
    return os.pathsep.join(sorted(roots))


@pytest.fixture
def unprivileged() -> Iterator[tuple[Path, Callable[..., subprocess.CompletedProcess[str]]]]:
    """A folder and a runner of `python -m agentbox` as a user file modes apply to.

    Root ignores file modes, so as root the runner drops to 'nobody' with an
    interpreter that user can execute; otherwise it runs as the current user.
    """
    base = Path(tempfile.mkdtemp(prefix="agentbox-ro-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AGENTBOX_", "COVERAGE", "PYTHON"))}
    preexec: Callable[[], None] | None = None
    command = [sys.executable, "-m", "agentbox"]
    if os.geteuid() == 0:
        import pwd

        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            shutil.rmtree(base)
            pytest.skip("running as root and there is no 'nobody' user to drop to")
        uid, gid = nobody.pw_uid, nobody.pw_gid

        def drop() -> None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        preexec = drop
        os.chmod(base, 0o755)
        os.chown(base, uid, gid)
        env["PYTHONPATH"] = _python_path()
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [sys.executable, shutil.which(f"python{version}"),
                      f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
        for candidate in filter(None, candidates):
            try:
                probe = subprocess.run([candidate, "-m", "agentbox", "--version"], env=env,
                                       cwd=base, preexec_fn=drop, capture_output=True,
                                       text=True, timeout=60)
            except OSError:  # that user may not execute this interpreter
                continue
            if probe.returncode == 0:
                command = [candidate, "-m", "agentbox"]
                break
        else:
            shutil.rmtree(base)
            pytest.skip(f"running as root and no Python {version} that 'nobody' may run "
                        "can import agentbox")

    def run(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, *argv], cwd=base, preexec_fn=preexec, text=True,
                              capture_output=True, timeout=60,
                              env={**env, "AGENTBOX_HOME": str(home), "AGENTBOX_USER": "alice",
                                   "AGENTBOX_NOW": str(T0)})

    try:
        yield base, run
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _give_away(root: Path) -> None:
    """Hand a tree to the user the runner runs as (a no-op when not root)."""
    if os.geteuid() != 0:
        return
    import pwd

    nobody = pwd.getpwnam("nobody")
    for path in [root, *root.rglob("*")]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


@pytest.mark.slow
def test_a_read_only_inbox_is_refused_for_writes_and_kept(
        unprivileged: tuple[Path, Callable[..., subprocess.CompletedProcess[str]]],
        query: Any) -> None:
    base, run = unprivileged
    home = base / "home"
    db = home / "inboxes" / "alice.sqlite3"
    _real_inbox(db)
    _give_away(home)
    db.chmod(0o400)
    before = db.read_bytes()

    for argv in (["ingest", "s", "new"], ["replay", "--all"]):
        done = run(*argv, home=home)
        assert done.returncode == 1, (argv, done.stderr)
        assert "read-only" in done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    # reading a read-only inbox still works
    done = run("status", "--json", home=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"]["pending"] == 3

    assert db.read_bytes() == before
    db.chmod(0o600)
    assert query(db, "SELECT COUNT(*) FROM events") == [(3,)]


def test_db_in_a_missing_folder_is_refused_without_making_it(cli: Cli, tmp_path: Path,
                                                             one_error: Any) -> None:
    target = tmp_path / "no" / "such" / "inbox.sqlite3"
    result = cli("--db", str(target), "ingest", "s", "1")
    assert result.code == 1
    assert "does not exist" in one_error(result.err)
    assert not (tmp_path / "no").exists()
    # a command that only reads says there is no inbox there, and makes nothing either
    result = cli("--db", str(target), "status", "--json")
    assert result.code == 0
    assert result.err == f"agentbox: no inbox at {target}\n"
    assert not (tmp_path / "no").exists()


def test_db_under_a_regular_file_is_one_clear_line(cli: Cli, tmp_path: Path,
                                                   one_error: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = cli("--db", str(blocker / "inbox.sqlite3"), "ingest", "s", "1")
    assert result.code == 1
    line = one_error(result.err)
    assert "cannot create the database" in line and "unexpected" not in line
