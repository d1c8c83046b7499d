"""The least an HTTP webhook receiver could do: the baseline of bench/serve.py.

    python raw_serve.py DB PORT_FILE

http.server's ThreadingHTTPServer speaking HTTP/1.1 (keep-alive; a thread
per connection), each thread with its own sqlite3 connection (WAL,
synchronous=FULL, a busy timeout). A POST to /hooks/SOURCE stores its body
under (source, Idempotency-Key) in a plain table with that key, one durable
transaction each, and answers 200 with the row's id once it committed. No
checks, no JSON parsing: what is left is the HTTP and the durable write.
Prints its port to PORT_FILE when it listens; SIGTERM stops it.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

local = threading.local()


def connection(path: str) -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        local.conn = conn
    return conn


def main() -> None:
    db, port_file = sys.argv[1], sys.argv[2]
    setup = sqlite3.connect(db)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("""CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY,
                     source TEXT NOT NULL, source_id TEXT NOT NULL, payload TEXT NOT NULL,
                     UNIQUE (source, source_id))""")
    setup.close()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            conn = connection(db)
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                """INSERT INTO events (source, source_id, payload) VALUES (?, ?, ?)
                   ON CONFLICT (source, source_id) DO NOTHING RETURNING id""",
                (self.path.rpartition("/")[2], self.headers["Idempotency-Key"],
                 body.decode())).fetchone()
            conn.execute("COMMIT")
            answer = json.dumps({"outcome": "stored" if row else "duplicate",
                                 "id": row[0] if row else None}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256  # the same listen backlog as agentbox serve
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
