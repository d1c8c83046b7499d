"""A handler that floods stdout is refused quickly, its run recorded as failed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from agentbox.process import MAX_STDOUT

FLOOD = (f"import sys\nsys.stdin.read()\nchunk = b'x' * 65536\n"
         f"for _ in range({(MAX_STDOUT * 3) // 65536}):\n    sys.stdout.buffer.write(chunk)\n")


def test_output_past_the_bound_is_read_fast_and_rejected(home: Path, tmp_path: Path) -> None:
    flood = tmp_path / "flood.py"
    flood.write_text(FLOOD)
    ingest = subprocess.run([sys.executable, "-m", "agentbox", "ingest", "chat", "m1"],
                            capture_output=True, text=True, timeout=60)
    assert ingest.returncode == 0, ingest.stderr
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "agentbox", "run", "--json", "--",
                          sys.executable, str(flood)], capture_output=True, text=True,
                         timeout=120)
    elapsed = time.monotonic() - started
    assert run.returncode == 1, run.stderr
    [report] = json.loads(run.stdout)["runs"]
    assert report["outcome"] == "failed"
    assert "larger than" in report["error"]
    assert elapsed < 30, f"draining {3 * MAX_STDOUT} bytes took {elapsed:.1f}s"
