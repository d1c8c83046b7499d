"""Console and approval links: page first byte on 1,000,000 events; link answers under load.

* **Console pages.** A real `agentbox console` over a folder holding one inbox
  of 1,000,000 events (built by plain SQL on the real schema: mostly done with
  their history, 50 dead spread through it, a few hundred pending at the end),
  against the same console over an inbox of 1,000 events. Timed: the first
  byte of each page an operator opens (the inboxes, one inbox, its events,
  dead ones, a page far back, one event), the median of many requests each.
  The pages page by id and read the kept counts, so size should cost little:
  the target is at most 200 ms, and at most 10 times the small inbox's figure
  (a page takes about a millisecond, so a few random reads of a large file
  that is not yet in the page cache show as a large ratio of a small figure).
* **Approval links.** A real `agentbox serve` on SQLite; 20 client threads each
  answer their own approvals through their links (POST with the page's CSRF
  token), one durable answer each. The figure is the p99 of those requests,
  against the p99 of webhook deliveries from the same 20 clients to the same
  server (one durable write each): at most 3 times that, and at most 50 ms.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from benchlib import (
    T0,
    Row,
    clean_env,
    console_script,
    events_inbox,
    make_inbox,
    median,
    options,
    payload,
    percentile,
    progress,
    report,
    time_row,
    warn_if_memory,
    workdir,
)

CLIENTS = 20
USER = "bench"


def start(command: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """`agentbox serve|console` on a free loopback port; the process and its port."""
    import re

    proc = subprocess.Popen([str(console_script()), command, "--listen", "127.0.0.1:0"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"on http://127\.0\.0\.1:(\d+)/", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(found.group(1))
    raise SystemExit(f"agentbox {command} did not start (exit {proc.wait()})")


def first_byte(port: int, path: str) -> float:
    """Seconds from sending a GET on a fresh connection to its answer's first byte
    (the whole answer is read, and must be 200)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        start = time.perf_counter()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        chunks = [sock.recv(65536)]
        took = time.perf_counter() - start
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head = b"".join(chunks)[:12]
    if head != b"HTTP/1.1 200":
        raise SystemExit(f"GET {path} answered {head!r}")
    return took


def home_with(root: Path, name: str, total: int) -> dict[str, str]:
    """A home whose data folder holds one inbox of ``total`` events."""
    home = root / name
    inbox = home / "inboxes" / f"{USER}.sqlite3"
    inbox.parent.mkdir(parents=True)
    events_inbox(inbox, total, min(300, total // 10), 50)
    return {**clean_env(root), "AGENTBOX_HOME": str(home), "AGENTBOX_USER": USER,
            "AGENTBOX_NOW": str(T0)}


def pages(total: int) -> dict[str, str]:
    return {"inboxes": "/", "inbox": f"/i/{USER}", "events": f"/i/{USER}/events",
            "dead": f"/i/{USER}/events?state=dead",
            "far back": f"/i/{USER}/events?source=github&before={total // 2}",
            "event": f"/i/{USER}/events/{total // 3}"}


def console_rows(root: Path, big: int, small: int, tries: int) -> list[Row]:
    sides = {"big": (home_with(root, "big", big), big),
             "small": (home_with(root, "small", small), small)}
    figures: dict[str, dict[str, float]] = {}
    for side, (env, total) in sides.items():
        proc, port = start("console", env)
        try:
            for path in pages(total).values():  # warm: bytecode, templates, page cache
                first_byte(port, path)
            figures[side] = {name: median([first_byte(port, path) for _ in range(tries)])
                             for name, path in pages(total).items()}
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return [time_row(f"console: first byte of the {name} page, {big:,} events vs {small:,}",
                     figures["big"][name], figures["small"][name], 10,
                     note=f"median of {tries} requests", limit_s=0.2)
            for name in figures["big"]]


def drive(port: int, requests: list[tuple[str, str, dict[str, str]]]) -> tuple[list[float], int]:
    """Each request (method, path, headers and ``data``, its body) from CLIENTS kept-alive
    clients at once; every latency, and how many were not answered 200."""
    from concurrent.futures import ThreadPoolExecutor

    ready = threading.Barrier(CLIENTS)

    def client(k: int) -> tuple[list[float], int]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: list[float] = []
        failed = 0
        ready.wait()
        for method, path, sent in requests[k::CLIENTS]:
            started = time.perf_counter()
            conn.request(method, path, body=sent["data"],
                         headers={n: v for n, v in sent.items() if n != "data"})
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - started)
            failed += response.status != 200
        conn.close()
        return mine, failed

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(client, range(CLIENTS)))
    return [t for mine, _ in results for t in mine], sum(failed for _, failed in results)


def link_rows(root: Path, count: int) -> list[Row]:
    from agentbox.location import open_store

    home = root / "links"
    inbox = make_inbox(home / "inboxes" / f"{USER}.sqlite3")
    env = {**clean_env(root), "AGENTBOX_HOME": str(home), "AGENTBOX_USER": USER}
    now = int(time.time())
    answers: list[tuple[str, str, dict[str, str]]] = []
    with open_store(inbox, USER, durable=False) as store:
        for i in range(count):
            store.request_approval(f"a{i}", now, 86_400, f"approve step {i}")
        for approval in store.approvals(now):
            token = store.approval_token(USER, approval)
            form = urlencode({"csrf": store.link_csrf(token), "answer": "yes"})
            answers.append(("POST", f"/a/{token}", {
                "data": form, "Content-Type": "application/x-www-form-urlencoded"}))
    hooks = [("POST", "/hooks/bench", {"data": payload(i), "Idempotency-Key": f"d-{i}",
                                       "Content-Type": "application/json"})
             for i in range(count)]
    proc, port = start("serve", env)
    try:
        drive(port, hooks[:CLIENTS])  # warm
        hook_latencies, hook_errors = drive(port, hooks[CLIENTS:])
        link_latencies, link_errors = drive(port, answers)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    p50 = percentile(link_latencies, 0.5)
    return [time_row(f"approval links: p99 of a link's POST (answer yes), {CLIENTS} clients "
                     "on SQLite, vs a webhook delivery's", percentile(link_latencies, 0.99),
                     percentile(hook_latencies, 0.99), 3,
                     note=f"{len(link_latencies):,} answers, p50 {p50 * 1000:.1f} ms",
                     errors=link_errors + hook_errors, limit_s=0.05)]


def main() -> None:
    args = options(__doc__.splitlines()[0])
    big, small, tries, answers = ((20_000, 1_000, 5, 200) if args.quick
                                  else (1_000_000, 1_000, 25, 2_000))
    with workdir(args, "console") as root:
        warn_if_memory(root)
        progress(f"console: building an inbox of {big:,} events")
        rows = console_rows(root, big, small, tries)
        progress(f"approval links: {answers:,} answers from {CLIENTS} clients")
        rows += link_rows(root, answers)
    report(rows, args)


if __name__ == "__main__":
    main()
