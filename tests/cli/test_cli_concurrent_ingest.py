"""Many real `agentbox ingest` processes at once: every event stored exactly once."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.processes import proc_env


def _race(home: Path, jobs: Sequence[tuple[list[str], str]]) -> list[tuple[int, str, str]]:
    """Start every job, then feed all their stdins at once, so they hit the inbox together.

    Each process reads its settings and then blocks on stdin; nothing touches
    the inbox until its input arrives. Output goes to files, so a chatty
    process can never block on a full pipe.
    """
    with ExitStack() as stack:
        outputs = [(stack.enter_context(tempfile.TemporaryFile("w+")),
                    stack.enter_context(tempfile.TemporaryFile("w+"))) for _ in jobs]
        env = proc_env(home, AGENTBOX_NOW=str(T0))
        procs = [subprocess.Popen([sys.executable, "-m", "agentbox", *argv], env=env,
                                  stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
                 for (argv, _), (out, err) in zip(jobs, outputs, strict=True)]
        try:
            for proc, (_, data) in zip(procs, jobs, strict=True):
                assert proc.stdin is not None
                proc.stdin.write(data)  # small enough for the pipe buffer: never blocks
                proc.stdin.close()
            codes = [proc.wait(timeout=120) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        results = []
        for code, (out, err) in zip(codes, outputs, strict=True):
            out.seek(0)
            err.seek(0)
            results.append((code, out.read(), err.read()))
        return results


def _stream(keys: range) -> str:
    return "".join(json.dumps({"source": "bulk", "source_id": f"b{k}", "payload": {"k": k}})
                   + "\n" for k in keys)


def _count(db: Path, query: Any) -> int:
    return int(query(db, "SELECT COUNT(*) FROM events")[0][0])


@pytest.mark.slow
def test_ten_writers_mixed_single_and_jsonl(home: Path, inbox_path: Path, query: Any) -> None:
    singles = [(["ingest", "single", f"s{i % 3}", "-f", "-", "--json"], json.dumps({"k": i % 3}))
               for i in range(6)]
    streams = [(["ingest", "--jsonl", "-", "--json"], _stream(range(p * 150, p * 150 + 300)))
               for p in range(4)]
    results = _race(home, [*singles, *streams])

    for code, _, err in results:
        assert code == 0, err
        assert "locked" not in err and "busy" not in err and "Traceback" not in err
    single_docs = [json.loads(out) for _, out, _ in results[:6]]
    stream_docs = [json.loads(out) for _, out, _ in results[6:]]
    assert sorted(d["outcome"] for d in single_docs) == ["duplicate"] * 3 + ["stored"] * 3
    for doc in stream_docs:
        assert (doc["stored"] + doc["duplicate"], doc["conflict"], doc["bad"]) == (300, 0, 0)
    distinct = 3 + 750
    assert sum(d["stored"] for d in stream_docs) == 750
    assert _count(inbox_path, query) == distinct
    # the pending tally, added once per transaction by each writer, lost nothing
    assert query(inbox_path, "SELECT n FROM state_counts WHERE tbl = 'events' "
                        "AND state = 'pending'") == [(distinct,)]
    # every process that saw a key was told the same id for it
    ids: dict[str, int] = {}
    for doc in single_docs:
        assert ids.setdefault(doc["source_id"], doc["id"]) == doc["id"]
    for doc in stream_docs:
        for entry in doc["lines"]:
            assert ids.setdefault(entry["source_id"], entry["id"]) == entry["id"]
    assert len(ids) == distinct
    assert dict(query(inbox_path, "SELECT source_id, id FROM events")) == ids


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(3))
def test_eight_processes_create_the_same_new_inbox(tmp_path: Path, query: Any,
                                                   round_: int) -> None:
    from agentbox.backends.sqlite.schema import SCHEMA_VERSION

    home = tmp_path / f"fresh{round_}"
    jobs = [(["ingest", "new", f"k{i % 6}", "-f", "-"], '{"same": true}') for i in range(8)]
    results = _race(home, jobs)
    for code, out, err in results:
        assert code == 0, err
        assert err == ""
        assert out.startswith(("stored new/k", "duplicate: new/k"))
    db = home / "inboxes" / "alice.sqlite3"
    assert _count(db, query) == 6
    assert sum(out.startswith("stored") for _, out, _ in results) == 6
    assert query(db, "SELECT version FROM migrations") == [(v,) for v in
                                                           range(1, SCHEMA_VERSION + 1)]
    assert query(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert query(db, "SELECT COUNT(*) FROM inboxes WHERE instance IS NOT NULL") == [(1,)]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    # the lock every open store holds stays: removing it would let a restore miss a holder
    assert sorted(p.name for p in db.parent.iterdir()) == [".alice.sqlite3.lock", "alice.sqlite3"]
    assert stat.S_IMODE((db.parent / ".alice.sqlite3.lock").stat().st_mode) == 0o600
