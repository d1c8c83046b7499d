"""Serve: webhook deliveries over HTTP from 50 concurrent clients, against two baselines.

The subject is a real `agentbox serve` process; 50 client threads, each on its
own kept-alive connection, POST deliveries (a small JSON object, a unique
Idempotency-Key) as fast as they are answered. Each answer comes after its
durable commit. The figures are deliveries per second and the latency of
each request (p50, p99), against:

* one `agentbox ingest` process per delivery, 50 at a time: what a webhook
  receiver that shells out would get (the target is at least 20 times that);
* `programs/raw_serve.py`: http.server's ThreadingHTTPServer on HTTP/1.1 with
  a sqlite3 connection per thread, storing the same body under the same key
  in a plain table (WAL, synchronous=FULL), one transaction per request,
  with no checks at all (the target is at least 0.7 of its rate);
* `programs/serve_before_h11.py`: the same `agentbox serve`, application and
  store on the hand-written HTTP server it had before h11
  (`programs/httpserver_before_h11.py`): what the rebuild costs or saves
  (the target is at least 0.9 of its rate, and latencies within 1.25 times).

Every side starts from a fresh inbox and is started before its clock runs.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlib import (
    PROGRAMS,
    Homes,
    Row,
    console_script,
    interleaved,
    median,
    options,
    payload,
    progress,
    rate_row,
    report,
    time_row,
    warn_if_memory,
    workdir,
)

CLIENTS = 50
_SERVING = re.compile(r"on http://127\.0\.0\.1:(\d+)/")


class Load:
    """The figures of one timed run: rate, latencies, errors."""

    def __init__(self, count: int, seconds: float, latencies: list[float], errors: int) -> None:
        self.rate = count / seconds
        ordered = sorted(latencies) or [0.0]
        self.p50 = ordered[len(ordered) // 2]
        self.p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        self.errors = errors


def drive(port: int, count: int) -> Load:
    """``count`` deliveries from CLIENTS threads on kept-alive connections."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    ready = threading.Barrier(CLIENTS + 1)

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        bodies = [(f"d-{i}", payload(i)) for i in range(k, count, CLIENTS)]
        mine: list[float] = []
        failed = 0
        ready.wait()
        for key, body in bodies:
            start = time.perf_counter()
            try:
                conn.request("POST", "/hooks/bench", body=body,
                             headers={"Idempotency-Key": key,
                                      "Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                failed += response.status != 200
            except (OSError, http.client.HTTPException):
                failed += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            mine.append(time.perf_counter() - start)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return Load(count, time.perf_counter() - start, latencies, errors[0])


def start_agentbox(env: dict[str, str], before: bool = False) -> tuple[subprocess.Popen[str], int]:
    """`agentbox serve` (``before``: on the HTTP server it had before h11); its port."""
    argv = ([sys.executable, str(PROGRAMS / "serve_before_h11.py")] if before
            else [str(console_script())])
    proc = subprocess.Popen([*argv, "serve", "--listen", "127.0.0.1:0"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = _SERVING.search(line)
        if found:
            # keep reading stderr so that the server never blocks on it
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(found.group(1))
    raise SystemExit(f"agentbox serve did not start (exit {proc.wait()})")


def start_raw(db: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    port_file = db.with_suffix(".port")
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "raw_serve.py"), str(db),
                             str(port_file)], env=env, text=True)
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("raw_serve.py did not start")
        time.sleep(0.02)
    return proc, int(port_file.read_text())


def served(start: Callable[[], tuple[subprocess.Popen[str], int]], count: int,
           into: list[Load]) -> float:
    """Start a server, time ``count`` deliveries against it, stop it; the rate."""
    proc, port = start()
    try:
        load = drive(port, count)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    into.append(load)
    return load.rate


def per_process(homes: Homes, count: int, errors: list[int]) -> float:
    """``count`` deliveries, each one `agentbox ingest` process, CLIENTS at a time."""
    env = homes.agentbox()
    script = str(console_script())

    def one(i: int) -> int:
        return subprocess.run([script, "ingest", "bench", f"d-{i}", "--payload", payload(i)],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False).returncode

    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        codes = list(pool.map(one, range(count)))
    seconds = time.perf_counter() - start
    errors[0] += sum(1 for c in codes if c != 0)
    return count / seconds


def main() -> None:
    args = options(__doc__.splitlines()[0])
    count, per_proc, rounds = (400, 40, 1) if args.quick else (5_000, 300, 3)
    subject: list[Load] = []
    bare: list[Load] = []
    old: list[Load] = []
    ingest_errors = [0]
    with workdir(args, "serve") as root:
        warn_if_memory(root)
        homes = Homes(root)
        progress(f"serve: {rounds} round(s) of {count:,} deliveries from {CLIENTS} clients, "
                 f"and {per_proc} one-process ingests")
        # warm-up: bytecode caches and the page cache, for every side alike
        served(lambda: start_agentbox(homes.agentbox()), CLIENTS, [])
        served(lambda: start_raw(homes.inbox().with_name("raw.sqlite3"), homes.env), CLIENTS, [])
        served(lambda: start_agentbox(homes.agentbox(), before=True), CLIENTS, [])
        rates = interleaved(rounds, {
            "serve": lambda: served(lambda: start_agentbox(homes.agentbox()), count, subject),
            "before": lambda: served(lambda: start_agentbox(homes.agentbox(), before=True),
                                     count, old),
            "raw": lambda: served(
                lambda: start_raw(homes.inbox().with_name("raw.sqlite3"), homes.env),
                count, bare),
            "ingest": lambda: per_process(homes, per_proc, ingest_errors),
        })
    p50, p99 = median([x.p50 for x in subject]), median([x.p99 for x in subject])
    serve_errors = sum(x.errors for x in subject)
    latency = f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; median of {rounds} round(s)"
    report([
        rate_row(f"serve: {CLIENTS} clients, agentbox serve vs one agentbox ingest process "
                 "per delivery", median(rates["serve"]), median(rates["ingest"]), 20,
                 unit="req/s", note=latency, errors=serve_errors + ingest_errors[0]),
        *against("agentbox serve vs bare http.server + sqlite3", "bare server", subject,
                 rates["serve"], bare, rates["raw"], (0.7, 1.5, 2.0)),
        *against("HTTP on h11 vs the hand-written server before it", "before", subject,
                 rates["serve"], old, rates["before"], (0.9, 1.25, 1.25)),
    ], args)


def against(versus: str, label: str, subject: list[Load], rates: list[float],
            baseline: list[Load], base_rates: list[float],
            targets: tuple[float, float, float]) -> list[Row]:
    """The rate, p50 and p99 rows of agentbox serve against one baseline of the same run."""
    p50, p99 = median([x.p50 for x in subject]), median([x.p99 for x in subject])
    base_p50, base_p99 = median([x.p50 for x in baseline]), median([x.p99 for x in baseline])
    note = (f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms ({label}: p50 "
            f"{base_p50 * 1000:.1f} ms, p99 {base_p99 * 1000:.1f} ms)")
    errors = sum(x.errors for x in subject) + sum(x.errors for x in baseline)
    return [rate_row(f"serve: {CLIENTS} clients, {versus}", median(rates), median(base_rates),
                     targets[0], unit="req/s", note=note, errors=errors),
            time_row(f"serve: p50 latency, {versus}", p50, base_p50, targets[1]),
            time_row(f"serve: p99 latency, {versus}", p99, base_p99, targets[2])]


if __name__ == "__main__":
    main()
