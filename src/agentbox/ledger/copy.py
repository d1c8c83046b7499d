"""One inbox's rows copied into another inbox, as one moment saw them.

A backup of an inbox whose engine cannot copy its own file (PostgreSQL: the
server keeps no file of one inbox) is an SQLite inbox file written by
:func:`copy_inbox`: every table read in one snapshot while writers carry on,
written in one transaction under the same ids, keys and instance id, so
``--db COPY`` opens it on any machine, with or without PostgreSQL. The tables
and their columns are the ledger's own, the same on every engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentbox.ledger.store import Store

CHUNK = 1000  # rows read and written at a time: a big inbox streams
INBOX_COLUMNS = ("instance", "created_at", "lease_holder", "lease_generation", "lease_until",
                 "lease_released", "dispatch_seq", "last_run", "last_prune", "link_secret",
                 "event_floor", "message_floor", "canonical_from")
# Each table of an inbox, with its columns (inbox_id aside), oldest row first
# (history in its order, so each story reads the same).
TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "events": (("id", "source", "source_id", "payload", "status", "attempts", "claim_gen",
                "available_at", "error", "created_at", "updated_at"), "id"),
    "history": (("at", "subject", "subject_id", "action", "generation", "detail"), "id"),
    "timers": (("name", "due", "every", "payload", "catch_up", "event_source", "event_id",
                "done", "created_at", "cron", "tz"), "name"),
    "approvals": (("id", "action", "requested_at", "expires_at"), "id"),
    "outbox": (("id", "body", "urgent", "state", "dispatch_key", "generation", "created_at",
                "sent_at", "error", "channel"), "id"),
    "dispatches": (("seq", "key", "mode", "state", "body", "urgent", "claimed_at", "deadline",
                    "tries", "max_tries", "finished_at", "error", "channel"), "seq"),
    "pruned_keys": (("source", "source_id", "digest", "event_id", "until"),
                    "source, source_id"),
    "epochs": (("epoch", "prefix", "first_event", "started_at"), "epoch"),
    "state_versions": (("version", "state", "updated_at", "generation", "author"), "version"),
    "steps": (("key", "status", "attempts", "generation", "started_at", "finished_at",
               "exit_code", "output", "error"), "key"),
    "pauses": (("kind", "reason", "since", "until", "streak", "streak_event",
                "streak_distinct", "waived_until"), "inbox_id"),
    "run_usage": (("id", "at", "generation", "events", "tokens", "cost"), "id"),
    "usage_slots": (("slot", "tokens", "cost"), "slot"),
}


def copy_inbox(source: Store, dest: Store) -> None:
    """Every row of ``source``'s inbox into ``dest``'s, which must be new and empty."""
    box = source.inbox_id
    with source.engine.snapshot(box) as reader, dest._write() as tx:
        row = reader.one(f"SELECT {', '.join(INBOX_COLUMNS)} FROM inboxes WHERE id = :box")
        assert row is not None
        tx.run(f"UPDATE inboxes SET ({', '.join(INBOX_COLUMNS)}) = "
               f"({', '.join(':' + c for c in INBOX_COLUMNS)}) WHERE id = :box",
               **dict(zip(INBOX_COLUMNS, row, strict=True)))
        for table, (columns, order) in TABLES.items():
            insert = (f"INSERT INTO {table} (inbox_id, {', '.join(columns)}) "
                      f"VALUES (:box, {', '.join(':' + c for c in columns)})")
            for chunk in reader.chunks(f"SELECT {', '.join(columns)} FROM {table} "
                                       f"WHERE inbox_id = :box ORDER BY {order}", CHUNK):
                tx.many(insert, [dict(zip(columns, r, strict=True))
                                 for r in chunk])
        dest.engine.recount(tx)
