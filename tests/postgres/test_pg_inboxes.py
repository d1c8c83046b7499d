"""Every inbox of one PostgreSQL schema, as a pool serves them: what it says when the
schema's rows cannot be read, word for word, since a pool logs it and goes on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentbox.errors import DatabaseError
from agentbox.ledger.inboxes import Inboxes
from agentbox.location import open_inboxes
from support.clock import T0
from support.fixtures import Opener
from support.postgres import own_session
from support.store import break_inbox

pytestmark = pytest.mark.postgres_only


@pytest.fixture
def inboxes(pg_url: str) -> Iterator[Inboxes]:
    found = open_inboxes(pg_url)
    yield found
    found.close()


def test_a_listing_the_server_refuses_names_the_schema_and_the_reason(
        inboxes: Inboxes, open_inbox: Opener, pg_url: str) -> None:
    """Only a schema with no tables yet lists no inbox; any other failed read of the
    inboxes is an error naming the place and the server's reason."""
    open_inbox("alice").ingest("chat", "m1", "{}", T0)
    with own_session(pg_url) as conn:
        conn.execute("ALTER TABLE inboxes RENAME COLUMN name TO gone")
    with pytest.raises(DatabaseError) as refused:
        inboxes.users()
    assert str(refused.value) == f'{pg_url}: database error: column "name" does not exist'


def test_a_failed_look_for_work_is_told_for_every_inbox_asked_in_the_servers_words(
        inboxes: Inboxes, open_inbox: Opener, pg_url: str) -> None:
    """The inboxes' next work is one read: when it fails, each inbox asked about is a
    failure, with the reason the pool logs for it."""
    for user in ("alice", "bob"):
        open_inbox(user).ingest("chat", "m1", "{}", T0)
    assert set(inboxes.next_work(T0, ["alice", "bob"])) == {"alice", "bob"}
    break_inbox(pg_url, "alice")
    assert inboxes.next_work(T0, ["alice", "bob"]) == {}
    why = f'{pg_url}: database error: relation "events" does not exist'
    assert inboxes.failures() == {"alice": why, "bob": why}


@pytest.mark.parametrize("listed_first", [False, True])
def test_an_inbox_opened_from_the_listing_commits_durably(
        pg_url: str, open_inbox: Opener, listed_first: bool) -> None:
    """serve writes every delivery through the listing's own session: its commits wait
    for the disk, as a store opened alone does, whether the listing was opened before
    the schema had any inbox (a plain session) or after."""
    listing = open_inboxes(pg_url) if listed_first else None
    open_inbox("alice")
    listing = listing or open_inboxes(pg_url)
    try:
        conn = listing.store("alice").engine.conn  # type: ignore[attr-defined]
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    finally:
        listing.close()
