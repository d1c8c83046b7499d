"""A minimal Typer app with one command doing the baseline's insert.

``agentbox ingest`` against this isolates what agentbox itself costs at
start-up beyond Typer and sqlite3 (the same interpreter runs both).

    typer_ingest.py DB SOURCE SOURCE_ID --payload PAYLOAD
"""

from __future__ import annotations

import typer
from raw_ingest import store_one

app = typer.Typer()  # the defaults, completion options included, as agentbox has them


@app.command()
def ingest(db: str, source: str, source_id: str, payload: str = "{}") -> None:
    """Store one event."""
    store_one(db, source, source_id, payload)


if __name__ == "__main__":
    app()
