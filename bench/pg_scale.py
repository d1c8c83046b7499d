"""PostgreSQL scale: claim/finish, status and dead list on 1,000,000 events in 1,000 inboxes
against 10,000 events in 10.

Both databases (a schema each) are made by agentbox and filled with plain
SQL: every inbox holds 1,000 events, mostly done with their history
(claimed, finished), a few dead and a few pending, the inboxes' rows
interleaved as deliveries to many users arrive; the inbox that is measured
holds enough pending events for every timed claim. After VACUUM ANALYZE
(what autovacuum does for a table this size), the engine's operations on
that one inbox are timed, alternating between the two databases; the ratio
is big over small, so 1.0 means the other inboxes cost nothing. Each side's
session is opened afresh every 25 reads (benchlib.REOPEN_EVERY says why). The
note gives what the big schema takes on disk.
"""

from __future__ import annotations

from typing import Any

import pglib
from benchlib import (
    REOPEN_EVERY,
    T0,
    Row,
    options,
    progress,
    report,
    scale_rows,
)

PER_INBOX = 1_000
DEAD = 5          # per inbox
PENDING = 10      # per inbox, except the measured one
BATCH = 10        # events per claim
HOLDER = "bench:1:cafe"
MEASURED = "user-1"

_FILL = [
    """INSERT INTO inboxes (name, instance, created_at)
       SELECT 'user-' || i, md5(i::text), %(t0)s FROM generate_series(1, %(inboxes)s) i""",
    # Event n of every inbox, round-robin over the inboxes: pending at the end of
    # each inbox, a few dead near its start, the rest done.
    """INSERT INTO events (inbox_id, source, source_id, payload, status, attempts, claim_gen,
                           error, created_at, updated_at)
       SELECT b.id, 'github', 'delivery-' || n,
              '{"action":"opened","number":' || n || ',"repo":"octo/bench","text":"look"}',
              s.status, CASE s.status WHEN 'pending' THEN 0 WHEN 'dead' THEN 3 ELSE 1 END,
              CASE s.status WHEN 'pending' THEN NULL ELSE 1 END,
              CASE s.status WHEN 'dead' THEN 'too many attempts (3); last: exit 1' END,
              %(t0)s - %(per)s + n, %(t0)s - %(per)s + n
       FROM generate_series(1, %(per)s) n CROSS JOIN inboxes b
       CROSS JOIN LATERAL (SELECT CASE
           WHEN n > %(per)s - CASE WHEN b.name = %(measured)s THEN %(measured_pending)s
                                  ELSE %(pending)s END THEN 'pending'
           WHEN n %% 10 = 0 AND n <= 10 * %(dead)s THEN 'dead'
           ELSE 'done' END AS status) s
       ORDER BY n, b.id""",
    """INSERT INTO history (inbox_id, at, subject, subject_id, action, generation)
       SELECT e.inbox_id, e.updated_at, 'event', e.id::text, a.action, 1
       FROM events e CROSS JOIN (VALUES (1, 'claimed'), (2, 'finished')) a (k, action)
       WHERE e.status <> 'pending' ORDER BY e.id, a.k""",
    """INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
       SELECT inbox_id, 'events', status, 0, COUNT(*) FROM events GROUP BY inbox_id, status""",
]


def build(url: str, inboxes: int, measured_pending: int) -> None:
    conn = pglib.session(url)
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")  # building is not what is measured
        for statement in _FILL:
            conn.execute(statement, {"inboxes": inboxes, "per": PER_INBOX, "t0": T0,
                                     "measured": MEASURED, "measured_pending": measured_pending,
                                     "pending": PENDING, "dead": DEAD})
    conn.execute("VACUUM ANALYZE")
    conn.close()


def disk(url: str) -> str:
    conn = pglib.session(url)
    row = conn.execute(
        """SELECT SUM(pg_total_relation_size(c.oid)), (SELECT COUNT(*) FROM events)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = current_schema() AND c.relkind = 'r'""").fetchone()
    conn.close()
    size, events = int(row[0]), int(row[1])
    return f"{size / 2**20:,.0f} MiB for {events:,} events with their history " \
           f"({size / events:,.0f} bytes each)"


def main() -> None:
    args = options(__doc__.splitlines()[0])
    url = pglib.server(args)
    if args.quick:
        big, small, claim_rounds, read_rounds = 20, 2, 5, 20
    else:
        big, small, claim_rounds, read_rounds = 1_000, 10, 25, 200
    measured_pending = claim_rounds * BATCH * 2 + 10  # warm-up and timed claims never run dry
    from agentbox.location import open_store
    from agentbox.rules.policy import Policy

    policy = Policy(max_batch=BATCH)
    with pglib.schema(url, "big") as big_url, pglib.schema(url, "small") as small_url:
        for name, side_url, inboxes in (("big", big_url, big), ("small", small_url, small)):
            progress(f"pg scale: building the {name} database: {inboxes * PER_INBOX:,} events "
                     f"in {inboxes:,} inboxes")
            build(side_url, inboxes, measured_pending)
        urls = {"big": big_url, "small": small_url}
        stores = {name: open_store(side_url, MEASURED) for name, side_url in urls.items()}
        for name, s in stores.items():
            if len(s.dead()) != DEAD:
                raise SystemExit(f"the {name} inbox has {len(s.dead())} dead events, not {DEAD}")
        rows = scale_rows(f"pg scale: {{label}}, {big * PER_INBOX:,} events in {big:,} inboxes "
                          f"vs {small * PER_INBOX:,}", stores, HOLDER, policy, claim_rounds,
                          read_rounds, f"one inbox of {PER_INBOX:,} events in each; "
                          f"reads: each side's session opened afresh every {REOPEN_EVERY}",
                          reopen=lambda name: open_store(urls[name], MEASURED))
        footprint = disk(big_url)
        progress(f"pg scale: on disk, {footprint}")
        closing: list[Any] = list(stores.values())
        for s in closing:
            s.close()
    rows[0] = Row(**{**rows[0].__dict__, "note": f"{rows[0].note}; {footprint}"})
    report(rows, args)


if __name__ == "__main__":
    main()
