"""pgqueuer, as its quick start sets it up: `pgq run pgqueuer_app:main` runs its worker.

``PEER_DB`` is the connection string (asyncpg, the driver pgqueuer's quick
start uses); ``PEER_SCHEMA`` the schema of the bench's own put first on the
search path. A job's payload is ``{"key": ..., "payload": ...}`` as JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from stamps import note


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["PEER_DB"], server_settings={
        "search_path": os.environ["PEER_SCHEMA"]})
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        note(json.loads(job.payload or b"{}")["key"])

    try:
        yield pgq
    finally:
        await connection.close()
