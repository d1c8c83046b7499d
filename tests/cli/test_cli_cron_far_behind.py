"""A cron timer years behind costs one short pass, so a webhook's ingest never waits on it.

A device whose clock starts at 1970 and is then set right, or a box switched
off for years, leaves a `* * * * *` timer millions of occurrences behind. The
scheduler pass that catches it up holds the inbox's write lock; it must count
what the timer owes, not walk it, so an `agentbox ingest` arriving meanwhile is
stored at once. Real processes, on both backends.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

YEAR = 365 * 86_400
ADDED = 1_072_915_200  # 2004-01-01T00:00:00Z

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("years", [10, 20])
def test_a_tick_years_behind_does_not_hold_up_an_ingest(
        cli: Any, backend_name: str, start: Callable[..., subprocess.Popen[str]],
        years: int) -> None:
    added = cli("schedule", "add", "minutely", "--cron", "* * * * *", "--tz", "Europe/Berlin",
                now=ADDED)
    assert added.code == 0, added.err
    now = ADDED + years * YEAR
    tick = start("schedule", "tick", now=now)
    time.sleep(0.5)  # the pass is under way (it took minutes when it walked)
    begun = time.monotonic()
    ingest = start("ingest", "chat", "m1", now=now)
    out, err = ingest.communicate(timeout=60)
    waited = time.monotonic() - begun
    assert ingest.returncode == 0, err
    assert waited < 5, waited
    assert out.startswith("stored chat/m1")
    _, err = tick.communicate(timeout=60)
    assert tick.returncode == 0, err
    fired = cli("events", "--json", "--source", "timer")
    [event] = json.loads(fired.out)
    latest = now - now % 60
    assert event["source_id"] == f"minutely@{latest}"
    assert event["payload"]["skipped"] == (latest - ADDED) // 60 - 1
