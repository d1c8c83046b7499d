"""A session's prepared statements: a statement a transaction sends again is executed
by name, its PREPARE having gone out in the message that first executed it; the least
used go when a session holds too many; a transaction that failed after sending anything
leaves nothing prepared (psycopg's record and agentbox's start again together), one
given up before sending forgets what it would have prepared: never a name executed that
does not exist nor one prepared twice."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from agentbox.backends.postgres import db
from agentbox.ledger.store import Store
from agentbox.rules.policy import Policy
from support.clock import T0
from support.postgres import statement_name, statements

pytestmark = pytest.mark.postgres_only
TTL = 600


def all_held(conn: psycopg.Connection[Any]) -> set[str]:
    """The names of the statements ``conn``'s session holds prepared, psycopg's too."""
    return {str(name) for name, in conn.execute(
        "SELECT name FROM pg_prepared_statements", prepare=False)}


def held(conn: psycopg.Connection[Any]) -> set[str]:
    """The names of the statements agentbox prepared in ``conn``'s session."""
    return {name for name in all_held(conn) if name.startswith("agentbox_")}


@pytest.fixture
def warned(store: Store) -> list[str]:
    """What the server warned the store's session of: a ROLLBACK sent outside a
    transaction draws "there is no transaction in progress"."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    found: list[str] = []
    conn.add_notice_handler(lambda d: found.append(f"{d.severity}: {d.message_primary}"))
    return found


def run(conn: psycopg.Connection[Any], *queries: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each of ``queries`` read in one transaction: the rows of the last."""
    with db.transaction(conn, 0) as tx:
        return [tx.read(query, params).fetchall() for query, params in queries][-1]


def test_a_claim_sent_again_prepares_nothing_and_executes_every_statement_by_name(
        store: Store, sent: list[str]) -> None:
    policy = Policy(lease_ttl=TTL)
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    for key in "ab":
        store.ingest("s", key, "{}", T0)
        sent.clear()
        claimed = store.claim("w", generation, T0, policy)
        claim = list(sent)
        assert claimed is not None and [e.source_id for e in claimed] == [key]
        assert store.finish("w", generation, T0, [e.id for e in claimed])
    first_read, writes = (statements(m) for m in claim)
    assert first_read[0] == "BEGIN" and writes[-1] == "COMMIT"
    executed = [s for s in first_read[1:] + writes[:-1] if not s.startswith("SET")]
    assert executed and all(s.startswith("EXECUTE agentbox_") for s in executed), sent
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    names = {statement_name(s) for s in executed}
    assert names <= held(conn)


def test_a_batch_s_list_of_ids_is_planned_with_its_values_each_time(
        store: Store, sent: list[str]) -> None:
    """A generic plan cannot see how many rows a list's inbox holds (for a batch of 100 it
    walked every event of the inbox): a statement with a list of two or more values goes
    out written in, one with a single value runs prepared."""
    policy = Policy(lease_ttl=TTL, max_batch=3)
    generation = store.acquire("w", T0, TTL)
    assert generation is not None
    for batch in ("ab", "c"):
        for key in batch:
            store.ingest("s", key, "{}", T0)
        sent.clear()
        claimed = store.claim("w", generation, T0, policy)
        assert claimed is not None and len(claimed) == len(batch)
        written = [s for s in statements(sent[-1])
                   if not s.startswith(("PREPARE", "EXECUTE", "COMMIT"))]
        if len(batch) > 1:  # the history's rows, and the claim's UPDATE of both ids
            assert any(s.startswith("UPDATE events SET status = 'running'")
                       for s in written), sent[-1]
        else:
            assert written == [], sent[-1]
        assert store.finish("w", generation, T0, [e.id for e in claimed])


def test_a_statement_is_prepared_in_the_message_that_first_executes_it(
        store: Store, sent: list[str]) -> None:
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    query = "SELECT %(n)s::bigint + 1"
    sent.clear()
    assert run(conn, (query, {"n": 1})) == [(2,)]
    assert run(conn, (query, {"n": 41})) == [(42,)]
    first, _, second, _ = sent
    prepare, begin, execute = statements(first)
    assert prepare.startswith("PREPARE agentbox_") and prepare.endswith(
        "(bigint) AS SELECT $1::bigint + 1")
    name = statement_name(prepare)
    assert (begin, execute) == ("BEGIN", f"EXECUTE {name}(1)")
    assert statements(second) == ["BEGIN", f"EXECUTE {name}(41)"]


def test_values_are_written_in_as_literals_and_percent_signs_stay_text(store: Store) -> None:
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    query = "SELECT %(text)s || '%%', %(flag)s, %(none)s::text, %(n)s, %(text)s"
    values = {"text": "it's 100% %s", "flag": True, "none": None, "n": -(2**63)}
    for _ in range(2):
        assert run(conn, (query, values)) == [
            ("it's 100% %s%", True, None, -(2**63), "it's 100% %s")]


def test_a_session_holds_at_most_its_limit_the_least_used_going_first(
        store: Store, sent: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    monkeypatch.setitem(db._PREPARED, conn, db.Prepared(limit=2))
    queries = [f"SELECT %(n)s::bigint * {k}" for k in range(3)]
    run(conn, (queries[0], {"n": 1}))
    sent.clear()
    run(conn, (queries[1], {"n": 1}))
    second = statement_name(statements(sent[0])[0])
    run(conn, (queries[0], {"n": 1}))  # the first is used again: the second goes first
    assert run(conn, (queries[2], {"n": 3})) == [(6,)]
    sent.clear()
    assert run(conn, (queries[0], {"n": 5})) == [(0,)]
    assert statements(sent[0])[:2] == [f"DEALLOCATE {second}", "BEGIN"]
    assert len(held(conn)) == 2
    sent.clear()
    assert run(conn, (queries[1], {"n": 5})) == [(5,)]
    assert statements(sent[0])[0].startswith("PREPARE")  # prepared anew
    run(conn, (queries[1], {"n": 5}))
    assert len(held(conn)) == 2


@pytest.mark.parametrize("failing", ["SELECT 1 / %(n)s::bigint",
                                     "SELECT %(n)s::bigint FROM no_such_table"],
                         ids=["after-its-prepare", "in-its-prepare"])
def test_a_failed_transaction_leaves_nothing_prepared(
        store: Store, sent: list[str], failing: str, warned: list[str]) -> None:
    """A PREPARE outlives the transaction that failed after it, and one may fail itself:
    the transaction ends with DEALLOCATE ALL (after a ROLLBACK only where one had begun),
    and what it sends next is prepared anew."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    good = "SELECT %(n)s::bigint"
    assert run(conn, (good, {"n": 1})) == [(1,)]
    with pytest.raises(psycopg.Error), db.transaction(conn, 0) as tx:
        tx.reads([(good, {"n": 2}), (failing, {"n": 0})])
    assert conn.info.transaction_status == db.IDLE and held(conn) == set()
    assert warned == []
    sent.clear()
    assert run(conn, (good, {"n": 7})) == [(7,)]
    assert statements(sent[0])[0].startswith("PREPARE")


def test_psycopg_and_agentbox_start_again_together_after_a_rollback(store: Store) -> None:
    """Reads sent many times are prepared by psycopg, which deallocates every statement
    of the session when it sees a ROLLBACK: both records are emptied with the server's,
    and every statement after runs."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    generation = store.acquire("w", T0, TTL)
    for _ in range(8):
        store.lease()
        assert store.claim("w", generation or 0, T0, Policy(lease_ttl=TTL)) == []
    assert all_held(conn) - held(conn) and held(conn)  # psycopg's and agentbox's
    with pytest.raises(Interrupted), db.transaction(conn, store.inbox_id) as tx:
        tx.read("SELECT 1")
        raise Interrupted
    assert all_held(conn) == set()
    for _ in range(8):
        lease = store.lease()
        assert lease is not None and lease.generation == generation
        assert store.claim("w", generation or 0, T0, Policy(lease_ttl=TTL)) == []


def test_a_snapshot_that_failed_leaves_nothing_prepared(store: Store, warned: list[str]
                                                        ) -> None:
    """psycopg rolls the snapshot back; agentbox then deallocates, with no second ROLLBACK."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    generation = store.acquire("w", T0, TTL)
    assert generation is not None and held(conn)
    with pytest.raises(Interrupted), store.engine.snapshot(store.inbox_id) as reader:
        reader.rows("SELECT id FROM events WHERE inbox_id = :box")
        raise Interrupted
    assert all_held(conn) == set() and warned == []
    assert store.claim("w", generation, T0, Policy(lease_ttl=TTL)) == []


def test_a_new_session_prepares_afresh(store: Store, pg_url: str) -> None:
    """The record belongs to its session: another connection of the same process knows
    none of it."""
    from agentbox.location import open_store

    query = "SELECT %(n)s::bigint"
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    run(conn, (query, {"n": 1}))
    with open_store(pg_url, "alice") as other:
        other_conn: Any = other.engine.conn  # type: ignore[attr-defined]
        assert run(other_conn, (query, {"n": 2})) == [(2,)]
        assert len(held(other_conn)) == 1


def test_statements_another_record_left_on_the_session_are_never_executed(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooler may hand a session on with a former client's statements still prepared:
    a new record (a new client) numbers its own from 1 again, under names of its own."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    assert run(conn, ("SELECT %(n)s::bigint * 100", {"n": 2})) == [(200,)]
    monkeypatch.setitem(db._PREPARED, conn, db.Prepared())
    assert run(conn, ("SELECT %(n)s::bigint - 1", {"n": 2})) == [(1,)]
    assert len(held(conn)) == 2


def test_a_transaction_given_up_before_its_prepare_went_out_forgets_it(
        store: Store, sent: list[str]) -> None:
    """A claim that finds a timer due is given up with its writes unsent: the statement
    whose PREPARE was queued with them is prepared when it is next sent, and giving up
    sent nothing."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    query = "UPDATE inboxes SET last_run = %(n)s WHERE id = %(n)s"
    sent.clear()
    with pytest.raises(Interrupted), db.transaction(conn, 0) as tx:
        tx.write(query, {"n": 0})
        raise Interrupted
    assert sent == []
    with db.transaction(conn, 0) as tx:
        tx.write(query, {"n": 0})
    assert statements(sent[0])[0].startswith("PREPARE") and len(held(conn)) == 1


def test_a_transaction_of_more_new_statements_than_the_limit_runs_them_all(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statements one transaction displaces are deallocated by the next one: this
    one may still execute them."""
    conn: Any = store.engine.conn  # type: ignore[attr-defined]
    monkeypatch.setitem(db._PREPARED, conn, db.Prepared(limit=2))
    queries = [(f"SELECT %(n)s::bigint * {k}", {"n": 2}) for k in range(4)]
    with db.transaction(conn, 0) as tx:
        assert tx.reads(queries) == [[(0,)], [(2,)], [(4,)], [(6,)]]
    assert len(held(conn)) == 4
    assert run(conn, queries[3]) == [(6,)]
    assert len(held(conn)) == 2


class Interrupted(Exception):
    """Raised inside a transaction's block, as a failing caller would."""
