"""DBOS Transact, as a user would set it up: `python dbos_app.py` launches its worker.

A workflow per item, enqueued on the queue ``bench`` with the item's key as
its workflow id. ``PEER_DB`` is the system database's SQLAlchemy URL
(``sqlite:///FILE`` or ``postgresql+psycopg://...``), ``PEER_SCHEMA`` the
schema of its tables on PostgreSQL. The worker runs until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import threading

from dbos import DBOS, DBOSConfig
from stamps import note

CONFIG: DBOSConfig = {"name": "bench", "system_database_url": os.environ.get("PEER_DB"),
                      "dbos_system_schema": os.environ.get("PEER_SCHEMA", "dbos")}
QUEUE = "bench"


@DBOS.workflow(name="stamp")
def stamp(key: str, payload: str) -> None:
    note(key)


def main() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(config=CONFIG)
    DBOS.launch()
    DBOS.register_queue(QUEUE)
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
