"""The schema, as an ordered list of migrations.

Migration N brings a file from ``user_version`` N-1 to N. Never edit a
migration that has shipped; append a new one.
"""

from __future__ import annotations

from agentbox.rules.records import EVENT_STATES, OUTBOX_STATES

# Counts per state are kept by triggers, so `status` costs the same on a
# million events as on ten.
COUNTED = {
    "events": ("status", EVENT_STATES),
    "outbox": ("state", OUTBOX_STATES),
}


def _count_triggers() -> str:
    parts: list[str] = []
    for table, (column, states) in COUNTED.items():
        parts.extend(
            f"INSERT INTO state_counts (tbl, state, n) VALUES ('{table}', '{state}', 0);"
            for state in states
        )
        parts.append(f"""
CREATE TRIGGER {table}_count_insert AFTER INSERT ON {table} BEGIN
    UPDATE state_counts SET n = n + 1 WHERE tbl = '{table}' AND state = NEW.{column};
END;
CREATE TRIGGER {table}_count_update AFTER UPDATE OF {column} ON {table}
WHEN OLD.{column} <> NEW.{column} BEGIN
    UPDATE state_counts SET n = n - 1 WHERE tbl = '{table}' AND state = OLD.{column};
    UPDATE state_counts SET n = n + 1 WHERE tbl = '{table}' AND state = NEW.{column};
END;
CREATE TRIGGER {table}_count_delete AFTER DELETE ON {table} BEGIN
    UPDATE state_counts SET n = n - 1 WHERE tbl = '{table}' AND state = OLD.{column};
END;""")
    return "\n".join(parts)


_V1 = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE migrations (
    version INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
);

CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    payload TEXT NOT NULL,                 -- canonical JSON object
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'done', 'dead')),
    attempts INTEGER NOT NULL DEFAULT 0,   -- counted at claim time
    claim_gen INTEGER,                     -- lease generation of the last claim
    available_at INTEGER NOT NULL DEFAULT 0,  -- retry backoff
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (source, source_id)
);
CREATE INDEX events_by_status ON events (status, id);

CREATE TABLE lease (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    holder TEXT NOT NULL,
    generation INTEGER NOT NULL,
    until INTEGER NOT NULL
);

CREATE TABLE history (
    id INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,
    subject TEXT NOT NULL,       -- event | message | dispatch | timer | approval
    subject_id TEXT NOT NULL,
    action TEXT NOT NULL,
    generation INTEGER,
    detail TEXT
);
CREATE INDEX history_by_subject ON history (subject, subject_id, id);

-- Whatever stores an event, its story starts in the same statement.
CREATE TRIGGER events_stored AFTER INSERT ON events BEGIN
    INSERT INTO history (at, subject, subject_id, action)
    VALUES (NEW.created_at, 'event', NEW.id, 'stored');
END;

CREATE TABLE timers (
    name TEXT PRIMARY KEY,
    due INTEGER NOT NULL,
    every INTEGER CHECK (every IS NULL OR every > 0),   -- NULL: one-off
    payload TEXT NOT NULL,
    catch_up TEXT NOT NULL DEFAULT 'coalesce' CHECK (catch_up IN ('coalesce', 'each')),
    event_source TEXT,           -- a fixed event key, for one-offs such as approval expiry
    event_id TEXT,
    done INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE INDEX timers_due ON timers (due) WHERE done = 0;

CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    requested_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE outbox (
    id INTEGER PRIMARY KEY,
    body TEXT NOT NULL,
    urgent INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'held'
        CHECK (state IN ('held', 'sending', 'sent', 'uncertain')),
    dispatch_key TEXT,
    generation INTEGER,
    created_at INTEGER NOT NULL,
    sent_at INTEGER,
    error TEXT
);
CREATE INDEX outbox_by_state ON outbox (state, id);
CREATE INDEX outbox_by_dispatch ON outbox (dispatch_key) WHERE dispatch_key IS NOT NULL;

CREATE TABLE dispatches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    mode TEXT NOT NULL CHECK (mode IN ('at-least-once', 'at-most-once')),
    state TEXT NOT NULL DEFAULT 'sending'
        CHECK (state IN ('sending', 'sent', 'failed', 'uncertain', 'unsent')),
    body TEXT NOT NULL,
    urgent INTEGER NOT NULL DEFAULT 0,
    claimed_at INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    tries INTEGER NOT NULL DEFAULT 1,
    finished_at INTEGER,
    error TEXT
);
CREATE INDEX dispatches_open ON dispatches (state, deadline);
CREATE INDEX dispatches_by_claim ON dispatches (state, claimed_at);  -- the gap

CREATE TABLE state_counts (
    tbl TEXT NOT NULL,
    state TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (tbl, state)
) WITHOUT ROWID;
""" + _count_triggers()

# Version 2: bulk ingest pays per transaction, not per row, for what it does
# beyond a plain keyed insert. An event's "stored" entry is read from its
# created_at instead of being written as a history row, and the pending count
# of new events is added once per transaction by the code that inserts them.
_V2 = """
DROP TRIGGER events_stored;
DROP TRIGGER events_count_insert;
DELETE FROM history WHERE subject = 'event' AND action = 'stored';
"""

# Version 3: a released lease is marked as such, not dated a second before its
# release, so that it is free at any clock (a clock stepped back left it "held"
# until the clock caught up). A lease released before this version keeps its
# old date and is free once that has passed, as before.
_V3 = """
ALTER TABLE lease ADD COLUMN released INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1));
"""

# Version 4: each dispatch records how many tries its key may have (like its
# mode), so whichever dispatcher settles or takes it over applies the same bound.
_V4 = """
ALTER TABLE dispatches ADD COLUMN max_tries INTEGER NOT NULL DEFAULT 5 CHECK (max_tries >= 1);
"""

# Version 5: calendar schedules. A cron timer keeps its expression and the IANA
# zone its times are read in; every other timer leaves both NULL.
_V5 = """
ALTER TABLE timers ADD COLUMN cron TEXT;
ALTER TABLE timers ADD COLUMN tz TEXT CHECK ((tz IS NULL) = (cron IS NULL));
"""

# Version 6: the keys of pruned events are remembered for the dedupe window. The
# trigger refuses (silently, like ON CONFLICT DO NOTHING) to store a remembered
# key again, for every way an event is written; it costs one probe of a small
# table per insert. A separate table, rather than pruned rows left in events,
# keeps every reader of events unaware of pruning and a remembered key small.
_V6 = """
CREATE TABLE pruned_keys (
    source TEXT NOT NULL,
    source_id TEXT NOT NULL,
    digest BLOB NOT NULL,        -- sha256 of the canonical payload, first 16 bytes
    event_id INTEGER NOT NULL,   -- the pruned event, named to a redelivery
    until INTEGER NOT NULL,      -- remembered until then: arrival + dedupe window
    PRIMARY KEY (source, source_id)
) WITHOUT ROWID;

CREATE TRIGGER events_remembered BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM pruned_keys WHERE source = NEW.source
             AND source_id = NEW.source_id AND until > NEW.created_at)
BEGIN
    SELECT RAISE(IGNORE);
END;
"""

# Version 7: new events are counted by trigger again. Bulk ingest is now one
# INSERT ... SELECT per batch, where a per-row trigger costs little, and a
# single delivery becomes one autocommit statement that stores the event and
# its count together, with no explicit transaction around it.
_V7 = """
CREATE TRIGGER events_count_insert AFTER INSERT ON events BEGIN
    UPDATE state_counts SET n = n + 1 WHERE tbl = 'events' AND state = NEW.status;
END;
"""

# Version 8: the tables PostgreSQL has, so that the ledger's statements are the same
# on both engines. The inbox's own row (its instance id, lease, dispatch counter and
# the times of its last run and prune) moves from `meta`, `lease` and
# sqlite_sequence into `inboxes`, as on PostgreSQL; every other table gains
# `inbox_id`, which in a file is always 1 (stored in no bytes: SQLite keeps 0 and 1
# in a row's header). Adding a column with a constant default rewrites no row.
_V8 = """
CREATE TABLE inboxes (
    id INTEGER PRIMARY KEY,
    instance TEXT NOT NULL,                  -- random, fixed: keys unique across inboxes
    created_at INTEGER NOT NULL,
    lease_holder TEXT,                       -- NULL: never leased
    lease_generation INTEGER NOT NULL DEFAULT 0,
    lease_until INTEGER,                     -- once released: when it was
    lease_released INTEGER NOT NULL DEFAULT 0 CHECK (lease_released IN (0, 1)),
    dispatch_seq INTEGER NOT NULL DEFAULT 0, -- the last dispatch number handed out
    last_run INTEGER,                        -- when a run last claimed
    last_prune INTEGER                       -- when a prune last completed
);
INSERT INTO inboxes (id, instance, created_at, lease_holder, lease_generation, lease_until,
                     lease_released, dispatch_seq, last_run, last_prune)
SELECT 1, (SELECT value FROM meta WHERE key = 'instance'),
       COALESCE((SELECT applied_at FROM migrations WHERE version = 1), 0),
       l.holder, COALESCE(l.generation, 0), l.until, COALESCE(l.released, 0),
       COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'dispatches'), 0),
       (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_run'),
       (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_prune')
FROM (SELECT 1) AS one LEFT JOIN lease l ON l.one = 1;
DROP TABLE lease;
DROP TABLE meta;
ALTER TABLE events ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE history ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE timers ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE approvals ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE outbox ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE dispatches ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
ALTER TABLE pruned_keys ADD COLUMN inbox_id INTEGER NOT NULL DEFAULT 1;
"""

# Approval links: the inbox's secret that signs them, made on first need
# (NULL until then); `approve rotate-links` replaces it.
_V9 = """
ALTER TABLE inboxes ADD COLUMN link_secret TEXT;
"""

# Version 10: ids unique by construction, and key epochs. SQLite numbers a new row
# after the highest id left, so a table whose newest rows were pruned (or a file put
# back by a restore) would hand an id out twice: each inbox keeps the highest event
# and message id it knows to have been handed out (a prune raises it before it
# deletes, a restore sets it from both files), and new rows are numbered above it.
# An epoch starts with each restore: events from ``first_event`` on, and every
# dispatch claimed since, take keys of that epoch (see Core.key_prefix); epoch 0,
# never written, is the inbox's own instance id, so no key given before changes.
# Payloads stored before are rewritten in their JCS spelling (RFC 8785) a bounded
# step at a time, from the event id ``canonical_from`` on (ledger.canonical).
_V10 = """
ALTER TABLE inboxes ADD COLUMN event_floor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inboxes ADD COLUMN message_floor INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inboxes ADD COLUMN canonical_from INTEGER DEFAULT 0;  -- NULL: payloads all JCS
CREATE TABLE epochs (
    inbox_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    prefix TEXT NOT NULL,           -- what its keys start with (Core.key_prefix)
    first_event INTEGER NOT NULL,   -- the lowest event id keyed in this epoch
    started_at INTEGER NOT NULL,    -- when the restore that began it ran
    PRIMARY KEY (inbox_id, epoch)
) WITHOUT ROWID;
"""

# Version 11: durable runs. The agent's state, one row per version (the newest is
# the state; older ones are its history, trimmed to keep_state_versions), and
# the journal of steps, one row per KEY.
_V11 = """
CREATE TABLE state_versions (
    inbox_id INTEGER NOT NULL,
    version INTEGER NOT NULL,            -- 1, 2, ...; version 0 is {} and has no row
    state TEXT NOT NULL,                 -- canonical JSON object
    updated_at INTEGER NOT NULL,
    generation INTEGER,                  -- the lease generation that wrote it
    author TEXT NOT NULL,                -- run | operator
    PRIMARY KEY (inbox_id, version)
);

CREATE TABLE steps (
    inbox_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('started', 'done', 'failed', 'uncertain')),
    attempts INTEGER NOT NULL,           -- tries started
    generation INTEGER NOT NULL,         -- the lease generation of the last try
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    exit_code INTEGER,
    output BLOB,                         -- a done step's stdout
    error TEXT,
    PRIMARY KEY (inbox_id, key)
);
CREATE INDEX steps_by_status ON steps (inbox_id, status, finished_at);
"""

# Version 12: governed runs. `pauses` holds, per inbox, the pause in force (a tripped
# breaker or a spent budget; kind NULL: none), the streak of failed runs the breaker
# counts, and the end of a local day whose budget `resume` waived. `run_usage` is what
# each run's answer said it spent, summed per local day against the budgets. Messages
# and dispatches name their channel; every row an older version wrote is `default`'s.
_V12 = """
CREATE TABLE pauses (
    inbox_id INTEGER PRIMARY KEY,
    kind TEXT CHECK (kind IN ('breaker', 'budget')),
    reason TEXT,
    since INTEGER,
    until INTEGER,
    streak INTEGER NOT NULL DEFAULT 0,
    streak_event INTEGER,
    streak_distinct INTEGER NOT NULL DEFAULT 0 CHECK (streak_distinct IN (0, 1)),
    waived_until INTEGER
);
CREATE TABLE run_usage (
    id INTEGER PRIMARY KEY,
    inbox_id INTEGER NOT NULL DEFAULT 1,
    at INTEGER NOT NULL,
    generation INTEGER,
    events TEXT NOT NULL,
    tokens INTEGER,
    cost REAL
);
CREATE INDEX run_usage_by_time ON run_usage (inbox_id, at);
ALTER TABLE outbox ADD COLUMN channel TEXT NOT NULL DEFAULT 'default';
ALTER TABLE dispatches ADD COLUMN channel TEXT NOT NULL DEFAULT 'default';
CREATE INDEX dispatches_by_channel ON dispatches (inbox_id, channel, state, claimed_at);
"""

# Version 13: the index of due timers is written with the condition the ledger's
# queries use (`NOT done`, as on PostgreSQL). SQLite serves a query from a partial index
# only when the query's condition is the index's own, and `done = 0` is not `NOT done`
# to its planner: every scheduler pass and work lookup read every timer. The index of
# usage by time also holds what the budget check sums, so the check before each claim
# reads the index alone, not every run's row of the day.
_V13 = """
DROP INDEX timers_due;
CREATE INDEX timers_due ON timers (inbox_id, due) WHERE NOT done;
DROP INDEX run_usage_by_time;
CREATE INDEX run_usage_by_time ON run_usage (inbox_id, at, tokens, cost);
"""

# Version 14: the events a claim looks for before fresh ones (pending after a failed
# try: to retry, or out of tries) have an index of their own. Through the status index
# alone, that look walked every pending event, so a claim cost grew with the backlog;
# a new event (no try yet) is never in this one, so an ingest writes nothing more. The
# claim's queries name its condition term for term, as SQLite's planner needs.
_V14 = """
CREATE INDEX events_retrying ON events (inbox_id, id) WHERE status = 'pending' AND attempts > 0;
"""

# Version 15: what runs spent, totalled per quarter of an hour (the ledger's
# USAGE_SLOT_S), so that the budget check before a claim adds up a day's 96 totals at
# most: summing the day's runs grew with them (0.38 ms a check at 5,000 runs a day).
# The totals of the runs already recorded are made from their rows.
_V15 = """
CREATE TABLE usage_slots (
    inbox_id INTEGER NOT NULL DEFAULT 1,
    slot INTEGER NOT NULL,          -- its first second: a multiple of 900
    tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    PRIMARY KEY (inbox_id, slot)
) WITHOUT ROWID;
INSERT INTO usage_slots (inbox_id, slot, tokens, cost)
SELECT inbox_id, at - (at % 900 + 900) % 900, SUM(COALESCE(tokens, 0)),
       SUM(COALESCE(cost, 0.0))
FROM run_usage GROUP BY 1, 2;
"""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10,
                               _V11, _V12, _V13, _V14, _V15)
SCHEMA_VERSION = len(MIGRATIONS)
