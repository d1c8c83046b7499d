"""An inbox reached through the server's Unix socket: the URL libpq documents for it has
no host before its path (``postgresql:///db?host=/run/postgresql``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbox.backends.postgres.url import parse
from agentbox.location import open_store
from support.clock import T0
from support.fixtures import Opener

pytestmark = pytest.mark.postgres_only
SOCKET_DIR = Path("/var/run/postgresql")


def test_an_inbox_opened_through_the_socket_is_the_one_seen_over_tcp(
        pg_url: str, open_inbox: Opener) -> None:
    if not (SOCKET_DIR / ".s.PGSQL.5432").exists():
        pytest.skip(f"the test server has no socket in {SOCKET_DIR}")
    target = parse(pg_url)
    database = target.conninfo.rsplit("/", 1)[1].split("?")[0]
    url = f"postgresql:///{database}?host={SOCKET_DIR}&user=postgres&schema={target.schema}"
    with open_store(url, "alice") as over_socket:
        stored = over_socket.ingest("hook", "1", "{}", T0)
        assert over_socket.location == (f"postgresql:///{database}?host=%2Fvar%2Frun%2F"
                                         f"postgresql&user=postgres&schema={target.schema}")
    assert open_inbox("alice").event(stored.id) is not None
