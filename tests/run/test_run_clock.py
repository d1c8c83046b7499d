"""Runs when the clock steps back: a released lease does not block the next run."""

from __future__ import annotations

import json

from support.clock import T0
from support.fixtures import Cli


def test_a_clock_stepped_back_does_not_refuse_the_next_run(cli: Cli, handler: list[str]) -> None:
    assert cli("ingest", "chat", "m1", now=T0 + 3600).code == 0
    assert cli("run", "--", *handler, now=T0 + 3600).code == 0
    # An NTP step back, or AGENTBOX_NOW pinned to an earlier time: the lease was
    # released, so this run must not wait for the clock to pass the old run's time.
    assert cli("ingest", "chat", "m2", now=T0).code == 0
    result = cli("run", "--", *handler, now=T0)
    assert result.code == 0, result.err
    assert result.out.startswith("generation 2: 1 event(s) (2) done")
    doc = json.loads(cli("status", "--json", now=T0 - 7200).out)
    assert doc["lease"]["generation"] == 2 and doc["lease"]["released"] is True
    assert "free (released at 1970-01-12T13:46:40Z)" in cli("status", now=T0 - 7200).out
