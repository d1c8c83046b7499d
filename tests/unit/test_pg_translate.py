"""PostgreSQL's errors as agentbox's: the exit code a user gets and the words they read.

Each case is a real psycopg error, built as the driver raises it (its SQLSTATE
comes from its class), so every branch of ``translate`` is pinned by the
exact type and message it gives; ``_reason`` is pinned on libpq's own texts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from agentbox.errors import AgentboxError, BadInput, Busy, DatabaseError

if TYPE_CHECKING:
    import psycopg
else:  # the postgres extra: without it the suite runs, this module skipped
    psycopg = pytest.importorskip("psycopg")
pgerrors = psycopg.errors

from agentbox.backends.postgres.db import _reason, translate  # noqa: E402

WHERE = "pg.example:5432/test"
# libpq's words when nothing listens on the port: the host named twice, then why.
REFUSED = ('connection failed: connection to server at "127.0.0.1", port 1 failed: '
           "Connection refused\n\tIs the server running on that host and accepting "
           "TCP/IP connections?")
BUSY_CAUSES = [pgerrors.LockNotAvailable, pgerrors.SerializationFailure,
               pgerrors.DeadlockDetected, pgerrors.TooManyConnections,
               pgerrors.CannotConnectNow]


@pytest.mark.parametrize("error_class", BUSY_CAUSES, ids=lambda c: c.__name__)
def test_every_state_a_retry_can_cure_is_busy(error_class: type[psycopg.Error]) -> None:
    """Lock timeouts, serialization and deadlock failures, a full or starting server:
    exit 75, try again; only the first line of the server's text is kept."""
    found = translate(error_class("the server's reason\nDETAIL:  more"), WHERE)
    assert type(found) is Busy
    assert str(found) == f"{WHERE}: database stayed busy (the server's reason); try again"


@pytest.mark.parametrize(("error", "kind", "message"), [
    pytest.param(pgerrors.InsufficientPrivilege("permission denied for table events"),
                 DatabaseError, f"{WHERE}: permission denied: permission denied for table events",
                 id="42501-permission"),
    pytest.param(pgerrors.CharacterNotInRepertoire("character not in repertoire"), BadInput,
                 f"{WHERE}: text with a NUL character cannot be stored in PostgreSQL",
                 id="22021-not-in-repertoire"),
    pytest.param(pgerrors.UntranslatableCharacter("unsupported Unicode escape sequence"),
                 BadInput, f"{WHERE}: text with a NUL character cannot be stored in PostgreSQL",
                 id="22P05-untranslatable"),
    pytest.param(psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
                 BadInput, f"{WHERE}: text with a NUL character cannot be stored in PostgreSQL",
                 id="nul-refused-by-the-driver"),
    pytest.param(pgerrors.NumericValueOutOfRange("bigint out of range"), BadInput,
                 f"{WHERE}: a number is out of range (the largest is 2**63 - 1)",
                 id="22003-out-of-range"),
    pytest.param(pgerrors.ConnectionFailure("server closed the connection"), DatabaseError,
                 f"{WHERE}: cannot connect to PostgreSQL: server closed the connection",
                 id="08006-connection-class"),
    pytest.param(psycopg.OperationalError(REFUSED), DatabaseError,
                 f"{WHERE}: cannot connect to PostgreSQL: Connection refused",
                 id="no-state-operational-is-libpq-connecting"),
    pytest.param(pgerrors.AdminShutdown("terminating connection due to administrator command"),
                 DatabaseError, f"{WHERE}: the server ended the session: terminating "
                                "connection due to administrator command",
                 id="57P01-shutdown"),
    pytest.param(pgerrors.DiskFull("could not extend file: No space left on device"),
                 DatabaseError, f"{WHERE}: the database server's disk is full: could not "
                                "extend file: No space left on device",
                 id="53100-disk-full"),
    pytest.param(pgerrors.DiskFull(""), DatabaseError,
                 f"{WHERE}: the database server's disk is full: DiskFull",
                 id="empty-text-names-the-class"),
    # An operational error with a state of its own is no connection failure, and
    # "57" alone is not the server ending the session.
    pytest.param(pgerrors.QueryCanceled("canceling statement due to statement timeout"),
                 DatabaseError,
                 f"{WHERE}: database error: canceling statement due to statement timeout",
                 id="57014-canceled-is-plain"),
    # Without a state but not operational: the driver's own complaint, not libpq's.
    pytest.param(psycopg.InterfaceError("the connection is closed"), DatabaseError,
                 f"{WHERE}: database error: the connection is closed",
                 id="no-state-interface-is-plain"),
    pytest.param(psycopg.InterfaceError(" \n "), DatabaseError,
                 f"{WHERE}: database error: InterfaceError", id="blank-text-names-the-class"),
    pytest.param(pgerrors.UniqueViolation("duplicate key value violates unique constraint"),
                 DatabaseError,
                 f"{WHERE}: database error: duplicate key value violates unique constraint",
                 id="anything-else"),
])
def test_each_kind_of_failure_gets_its_own_words(error: psycopg.Error, kind: type[AgentboxError],
                                                 message: str) -> None:
    """The exact type sets the exit code; the exact words tell the user what to do."""
    found = translate(error, WHERE)
    assert type(found) is kind
    assert str(found) == message


@pytest.mark.parametrize(("text", "reason"), [
    pytest.param(REFUSED.splitlines()[0], "Connection refused", id="after-the-last-failed"),
    pytest.param("could not connect: SSL error: certificate verify failed",
                 "certificate verify failed", id="after-error"),
    pytest.param('connection to server at "db" (10.0.0.1), port 5432 failed: SSL error: '
                 "unexpected eof", "unexpected eof", id="failed-then-error"),
    pytest.param("server closed the connection unexpectedly",
                 "server closed the connection unexpectedly", id="no-marker-kept-whole"),
])
def test_the_reason_drops_the_host_details_libpq_repeats(text: str, reason: str) -> None:
    """libpq names the host once per attempt before why it failed; the user reads why."""
    assert _reason(text) == reason
