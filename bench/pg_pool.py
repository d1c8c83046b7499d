"""PostgreSQL pool: 4 `run --watch --all-users` processes sharing 200 inboxes, against 1.

The same figure as watch.py's pool, on PostgreSQL: every inbox holds two
pending events, `max_batch = 1`, the handler sleeps 20 ms per batch, and the
figure is events per second from the first batch to the last. The processes
share one schema (`--db` via AGENTBOX_DB), each inbox's lease keeping them
apart, and wake by LISTEN/NOTIFY. Each side of each round gets a fresh
schema made by agentbox, filled through its Store API, and dropped
afterwards. Every batch is kept in a file: an event handled twice or never
counts as an error.

Agentbox runs as `python -m agentbox` with this interpreter.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pglib
from benchlib import clean_env, options, report, workdir
from poollib import items, pool_rates, pool_row, users


@contextmanager
def filled(url: str, inboxes: int, home: Path) -> Iterator[dict[str, str]]:
    """A fresh schema holding ``inboxes`` users' inboxes with the pool's pending events;
    the environment that points agentbox at it."""
    from agentbox.location import open_store

    with pglib.schema(url, f"pool_{home.name}") as fresh:
        for user in users(inboxes):
            with open_store(fresh, user, durable=False) as store:
                store.ingest_many(items(), int(time.time()))
        yield {"AGENTBOX_DB": fresh}


def main() -> None:
    args = options(__doc__.splitlines()[0])
    url = pglib.server(args)
    inboxes, rounds = (24, 1) if args.quick else (200, 2)
    with workdir(args, "pg-pool") as root:
        env = {**clean_env(root), "PYTHONPATH": os.pathsep.join(sys.path)}
        rates, errors = pool_rates(root, env, inboxes, rounds, partial(filled, url, inboxes))
    report([pool_row("pg pool", inboxes, rounds, rates, errors,
                     note="; one schema, woken by LISTEN/NOTIFY")], args)


if __name__ == "__main__":
    main()
