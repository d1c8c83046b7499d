"""Load with a crash in the middle: nothing acknowledged is lost, nothing is stored twice.

10,000 deliveries from 50 client threads over kept-alive connections. Part way
through, the server is SIGKILLed and started again on the same port. A client
retries a delivery that failed or got no answer, with the same id and body,
as a webhook sender does, until it is answered.
"""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from support.serving import Served, start_server
from support.store import cli_inbox

pytestmark = pytest.mark.slow

TOTAL = 10_000
CLIENTS = 50
KILL_AFTER = 3_000  # answered deliveries before the SIGKILL
DEADLINE = 150.0  # seconds for the whole run: a bound, not an expectation


def test_ten_thousand_deliveries_survive_a_sigkill(home: Path) -> None:
    served = start_server(home)
    port = served.port
    answered: Counter[str] = Counter()  # outcome -> count
    acked: dict[int, str] = {}  # delivery -> the outcome that was answered 2xx
    unexpected: list[str] = []
    retries = [0] * CLIENTS
    lock = threading.Lock()
    killed = threading.Event()
    give_up = time.monotonic() + DEADLINE

    def client(k: int) -> None:
        conn: http.client.HTTPConnection | None = None
        for i in range(k, TOTAL, CLIENTS):
            body = json.dumps({"delivery": i, "text": "hello"})
            while time.monotonic() < give_up:
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    conn.request("POST", "/hooks/load", body=body,
                                 headers={"Idempotency-Key": f"d-{i}",
                                          "Content-Type": "application/json"})
                    response = conn.getresponse()
                    doc = json.loads(response.read())
                except (OSError, http.client.HTTPException, ValueError):
                    # refused, reset, or no answer: the same delivery again, as a sender would
                    if conn is not None:
                        conn.close()
                    conn = None
                    retries[k] += 1
                    time.sleep(0.05)
                    continue
                if response.status == 503:
                    retries[k] += 1
                    continue
                with lock:
                    if response.status == 200:
                        answered[doc["outcome"]] += 1
                        acked[i] = doc["outcome"]
                    else:
                        unexpected.append(f"d-{i}: {response.status} {doc}")
                break
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while len(acked) < KILL_AFTER and time.monotonic() < give_up:
        time.sleep(0.01)
    served.proc.send_signal(signal.SIGKILL)
    served.proc.wait(timeout=30)
    killed.set()
    in_flight_at_kill = TOTAL - len(acked)
    restarted: Served = start_server(home, port=port)
    for thread in threads:
        thread.join(timeout=max(1.0, give_up - time.monotonic()))
    elapsed = time.monotonic() - started
    assert restarted.stop() == 0
    assert not any(t.is_alive() for t in threads), "clients still retrying at the deadline"

    with cli_inbox(home) as store:
        rows = [(e.source_id, e.payload) for e in store.events(source="load", limit=2 * TOTAL)]
    stored = Counter(source_id for source_id, _ in rows)
    print(f"\n{TOTAL} deliveries, {CLIENTS} clients, {elapsed:.1f} s: "
          f"answered {dict(answered)}, {sum(retries)} retries, "
          f"{in_flight_at_kill} not yet answered at the SIGKILL, {len(rows)} rows")
    assert unexpected == []
    assert len(acked) == TOTAL, "some deliveries were never answered"
    assert all(n == 1 for n in stored.values())
    assert set(stored) == {f"d-{i}" for i in range(TOTAL)}
    assert all(json.loads(p)["delivery"] == int(s[2:]) for s, p in rows)
    assert answered["stored"] + answered["duplicate"] == TOTAL
    assert killed.is_set() and in_flight_at_kill > 0 and sum(retries) > 0
