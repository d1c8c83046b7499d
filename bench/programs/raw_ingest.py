"""The baseline: a bare Python program storing events with sqlite3 alone.

What a user would write instead of agentbox: parse the JSON, store the event
row under its UNIQUE (source, source_id) key in one BEGIN IMMEDIATE
transaction, WAL, synchronous=FULL, nothing else imported. It writes into
whatever ``events`` table DB has: a plain keyed table for the baselines, or
agentbox's own schema for the rows that show that schema's cost.

    raw_ingest.py DB SOURCE SOURCE_ID PAYLOAD   one event
    raw_ingest.py DB --jsonl                    JSON lines on stdin, one transaction,
                                                row by row (each row's id read back)
    raw_ingest.py DB --jsonl-many               the same with one executemany: the
                                                least a program can do for it
    raw_ingest.py DB --jsonl-many --orjson      the same parsing and writing the JSON
                                                with orjson (imported only then)
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time

EVENT = """INSERT INTO events (source, source_id, payload, created_at, updated_at)
           VALUES (?, ?, ?, ?, ?) ON CONFLICT (source, source_id) DO NOTHING RETURNING id"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def canonical(text: str | bytes) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)


def store(conn: sqlite3.Connection, items: list[tuple[str, str, str]], now: int) -> int:
    """Store events in one transaction; how many were new."""
    stored = 0
    conn.execute("BEGIN IMMEDIATE")
    for source, source_id, payload in items:
        if conn.execute(EVENT, (source, source_id, payload, now, now)).fetchone():
            stored += 1
    conn.execute("COMMIT")
    return stored


def store_many(conn: sqlite3.Connection, items: list[tuple[str, str, str]], now: int) -> int:
    """Store events in one transaction with one executemany; how many were new."""
    before = conn.total_changes
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(EVENT.removesuffix(" RETURNING id"),
                     [(source, source_id, payload, now, now)
                      for source, source_id, payload in items])
    conn.execute("COMMIT")
    return conn.total_changes - before


def store_one(path: str, source: str, source_id: str, payload: str) -> None:
    conn = connect(path)
    stored = store(conn, [(source, source_id, canonical(payload))], int(time.time()))
    conn.close()
    print(f"{'stored' if stored else 'duplicate'} {source}/{source_id}")


def read_lines() -> list[tuple[str, str, str]]:
    items = []
    for raw in sys.stdin.buffer:
        doc = json.loads(raw)
        items.append((doc["source"], doc["source_id"],
                      json.dumps(doc["payload"], sort_keys=True, separators=(",", ":"),
                                 ensure_ascii=False)))
    return items


def read_lines_orjson() -> list[tuple[str, str, str]]:
    import orjson

    items = []
    for raw in sys.stdin.buffer:
        doc = orjson.loads(raw)
        items.append((doc["source"], doc["source_id"],
                      orjson.dumps(doc["payload"], option=orjson.OPT_SORT_KEYS).decode()))
    return items


def store_lines(path: str, many: bool, fast: bool = False) -> None:
    items = read_lines_orjson() if fast else read_lines()
    conn = connect(path)
    stored = (store_many if many else store)(conn, items, int(time.time()))
    conn.close()
    print(f"{stored} stored")


if __name__ == "__main__":
    if sys.argv[2:] in (["--jsonl"], ["--jsonl-many"], ["--jsonl-many", "--orjson"]):
        store_lines(sys.argv[1], sys.argv[2] == "--jsonl-many", sys.argv[3:] == ["--orjson"])
    else:
        store_one(*sys.argv[1:5])
