"""The PostgreSQL schema, as an ordered list of migrations (each a list of statements).

Migration N brings a schema from version N-1 to N. Never edit a migration
that has shipped; append a new one.

Every inbox of the database shares these tables: the ``inboxes`` row of a user
carries its lease (so taking the inbox lock reads the fence in the same
statement) and its dispatch counter; every other row carries ``inbox_id``. Ids
of events and messages come from one sequence per table, so they are unique
across the database and never reused; each table's primary key is (inbox_id,
id), so an inbox's newest rows are the end of one index walk. Text that keys,
indexes or orders rows compares in code point order (``COLLATE "C"``), as in
SQLite, whatever the database's collation: byte comparisons, the cheapest
PostgreSQL has. There are no foreign keys: an ``inbox_id`` always comes from
the ``inboxes`` row the store resolved, and a foreign key check would lock
that row on every ingest.
"""

from __future__ import annotations

from agentbox.rules.records import (
    CATCH_UP_MODES,
    DELIVERY_MODES,
    DISPATCH_STATES,
    EVENT_STATES,
    OUTBOX_STATES,
)

# Counts per state are kept in state_counts, so `status` costs the same on a
# million events as on ten: by triggers for updates, deletes and outbox rows
# (always under the inbox lock, in slot 0), and by the ingest statement itself
# for events, in a slot picked by the session so that concurrent ingests into
# one inbox do not queue on one counter row. A count is the sum of its slots.
COUNTED = {
    "events": ("status", EVENT_STATES),
    "outbox": ("state", OUTBOX_STATES),
}
INGEST_SLOTS = 31
INGEST_SLOT = f"1 + mod(pg_backend_pid(), {INGEST_SLOTS})"


def _among(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def _count_triggers() -> list[str]:
    """Statement triggers that fold a statement's moves between states into the tallies."""
    statements: list[str] = []
    upsert = """
        INSERT INTO state_counts (inbox_id, tbl, state, slot, n)
        SELECT inbox_id, '{table}', state, 0, SUM(d) FROM ({moves}) moved
        GROUP BY inbox_id, state HAVING SUM(d) <> 0
        ON CONFLICT (inbox_id, tbl, state, slot) DO UPDATE SET n = state_counts.n + excluded.n"""
    for table, (column, _) in COUNTED.items():
        gone = f"SELECT inbox_id, {column} AS state, -1 AS d FROM gone"
        came = f"SELECT inbox_id, {column} AS state, 1 AS d FROM came"
        kinds = {"update": ("OLD TABLE AS gone NEW TABLE AS came", f"{gone} UNION ALL {came}"),
                 "delete": ("OLD TABLE AS gone", gone)}
        if table == "outbox":  # events count their inserts in the ingest statement
            kinds["insert"] = ("NEW TABLE AS came", came)
        for kind, (tables, moves) in kinds.items():
            name = f"{table}_count_{kind}"
            statements.append(f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN{upsert.format(table=table, moves=moves)};
    RETURN NULL;
END $$""")
            statements.append(f"""
CREATE TRIGGER {name} AFTER {kind.upper()} ON {table} REFERENCING {tables}
FOR EACH STATEMENT EXECUTE FUNCTION {name}()""")
    return statements


# A watcher sleeps on LISTEN (see .wake): every change to an inbox's rows, or to
# its lease, notifies the schema's channel with the inbox's id, at commit. New
# events notify from the statement that stores them (see .inbox). PostgreSQL
# folds the same notification within a transaction into one.
NOTIFIED = {"events": ("UPDATE", "DELETE"), "outbox": ("INSERT", "UPDATE"),
            "dispatches": ("UPDATE",), "timers": ("INSERT", "UPDATE", "DELETE"),
            "approvals": ("INSERT",)}


def _wake_triggers() -> list[str]:
    statements = ["""
CREATE FUNCTION notify_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA, CASE TG_OP WHEN 'DELETE' THEN OLD.inbox_id
                                                 ELSE NEW.inbox_id END::text);
    RETURN NULL;
END $$""", """
CREATE FUNCTION notify_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA, NEW.id::text);
    RETURN NULL;
END $$""", """
CREATE TRIGGER inboxes_wake AFTER UPDATE OF lease_holder, lease_generation, lease_until,
    lease_released ON inboxes FOR EACH ROW EXECUTE FUNCTION notify_lease()"""]
    statements += [f"""
CREATE TRIGGER {table}_wake AFTER {" OR ".join(kinds)} ON {table}
FOR EACH ROW EXECUTE FUNCTION notify_inbox()""" for table, kinds in NOTIFIED.items()]
    return statements


_V1: tuple[str, ...] = (
    """
CREATE TABLE migrations (
    version integer PRIMARY KEY,
    applied_at bigint NOT NULL
)""",
    """
CREATE TABLE inboxes (
    id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,      -- the agentbox user
    instance text NOT NULL,                     -- random, fixed: keys unique across inboxes
    created_at bigint NOT NULL,
    lease_holder text,                          -- NULL: never leased
    lease_generation bigint NOT NULL DEFAULT 0,
    lease_until bigint,                         -- once released: when it was
    lease_released boolean NOT NULL DEFAULT false,  -- free at any clock
    dispatch_seq bigint NOT NULL DEFAULT 0,     -- the last dispatch number handed out
    last_run bigint,                            -- when a run last claimed
    last_prune bigint                           -- when a prune last completed
)""",
    f"""
CREATE TABLE events (
    inbox_id integer NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    source text COLLATE "C" NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    payload text NOT NULL,                      -- canonical JSON object, byte for byte
    status text COLLATE "C" NOT NULL DEFAULT 'pending' CHECK (status IN {_among(EVENT_STATES)}),
    attempts bigint NOT NULL DEFAULT 0,         -- counted at claim time
    claim_gen bigint,                           -- lease generation of the last claim
    available_at bigint NOT NULL DEFAULT 0,     -- retry backoff
    error text,
    created_at bigint NOT NULL,                 -- also the 'stored' line of its story
    updated_at bigint NOT NULL,
    PRIMARY KEY (inbox_id, id),
    UNIQUE (inbox_id, source, source_id)
)""",
    "CREATE INDEX events_by_status ON events (inbox_id, status, id)",
    """
CREATE TABLE history (
    inbox_id integer NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    at bigint NOT NULL,
    subject text COLLATE "C" NOT NULL,          -- event | message | dispatch | timer | approval
    subject_id text COLLATE "C" NOT NULL,
    action text NOT NULL,
    generation bigint,
    detail text,
    PRIMARY KEY (inbox_id, id)
)""",
    "CREATE INDEX history_by_subject ON history (inbox_id, subject, subject_id, id)",
    f"""
CREATE TABLE timers (
    inbox_id integer NOT NULL,
    name text COLLATE "C" NOT NULL,
    due bigint NOT NULL,
    every bigint CHECK (every IS NULL OR every > 0),  -- NULL: one-off
    payload text NOT NULL,
    catch_up text NOT NULL DEFAULT 'coalesce' CHECK (catch_up IN {_among(CATCH_UP_MODES)}),
    event_source text,                          -- a fixed event key, for approval expiry
    event_id text,
    done boolean NOT NULL DEFAULT false,
    created_at bigint NOT NULL,
    cron text,                                  -- a calendar schedule: a cron expression
    tz text CHECK ((tz IS NULL) = (cron IS NULL)),  -- read in this IANA time zone
    PRIMARY KEY (inbox_id, name)
)""",
    "CREATE INDEX timers_due ON timers (inbox_id, due) WHERE NOT done",
    """
CREATE TABLE approvals (
    inbox_id integer NOT NULL,
    id text COLLATE "C" NOT NULL,
    action text NOT NULL,
    requested_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (inbox_id, id)
)""",
    f"""
CREATE TABLE outbox (
    inbox_id integer NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    body text NOT NULL,
    urgent boolean NOT NULL DEFAULT false,
    state text COLLATE "C" NOT NULL DEFAULT 'held' CHECK (state IN {_among(OUTBOX_STATES)}),
    dispatch_key text COLLATE "C",
    generation bigint,
    created_at bigint NOT NULL,
    sent_at bigint,
    error text,
    PRIMARY KEY (inbox_id, id)
)""",
    "CREATE INDEX outbox_by_state ON outbox (inbox_id, state, id)",
    """CREATE INDEX outbox_by_dispatch ON outbox (inbox_id, dispatch_key)
       WHERE dispatch_key IS NOT NULL""",
    f"""
CREATE TABLE dispatches (
    inbox_id integer NOT NULL,
    seq bigint NOT NULL,
    key text COLLATE "C" NOT NULL,
    mode text NOT NULL CHECK (mode IN {_among(DELIVERY_MODES)}),
    state text COLLATE "C" NOT NULL DEFAULT 'sending' CHECK (state IN {_among(DISPATCH_STATES)}),
    body text NOT NULL,
    urgent boolean NOT NULL DEFAULT false,
    claimed_at bigint NOT NULL,
    deadline bigint NOT NULL,
    tries bigint NOT NULL DEFAULT 1,
    max_tries bigint NOT NULL CHECK (max_tries >= 1),  -- recorded on the claim, like mode
    finished_at bigint,
    error text,
    PRIMARY KEY (inbox_id, seq),
    UNIQUE (inbox_id, key)
)""",
    "CREATE INDEX dispatches_open ON dispatches (inbox_id, state, deadline)",
    "CREATE INDEX dispatches_by_claim ON dispatches (inbox_id, state, claimed_at)",
    """
CREATE TABLE pruned_keys (
    inbox_id integer NOT NULL,
    source text COLLATE "C" NOT NULL,
    source_id text COLLATE "C" NOT NULL,
    digest bytea NOT NULL,                      -- of the canonical payload (rules.retention)
    event_id bigint NOT NULL,                   -- the pruned event, named to a redelivery
    until bigint NOT NULL,                      -- remembered until then
    PRIMARY KEY (inbox_id, source, source_id)
)""",
    """
CREATE TABLE state_counts (
    inbox_id integer NOT NULL,
    tbl text COLLATE "C" NOT NULL,
    state text COLLATE "C" NOT NULL,
    slot integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (inbox_id, tbl, state, slot)
)""",
    *_count_triggers(),
    *_wake_triggers(),
)

# Approval links: the inbox's secret that signs them, made on first need
# (NULL until then); `approve rotate-links` replaces it.
_V2 = ("ALTER TABLE inboxes ADD COLUMN link_secret text",)

# Version 3: key epochs and JCS payloads (see the SQLite schema's version 10). Ids here come from
# sequences, which never go back, so the floors a file keeps are only recorded.
_V3: tuple[str, ...] = (
    "ALTER TABLE inboxes ADD COLUMN event_floor bigint NOT NULL DEFAULT 0",
    "ALTER TABLE inboxes ADD COLUMN message_floor bigint NOT NULL DEFAULT 0",
    "ALTER TABLE inboxes ADD COLUMN canonical_from bigint DEFAULT 0",  # NULL: all JCS
    # prefix: what its keys start with; first_event: the lowest event id keyed in it;
    # started_at: when the restore that began it ran
    """CREATE TABLE epochs (inbox_id integer NOT NULL, epoch integer NOT NULL,
       prefix text NOT NULL, first_event bigint NOT NULL, started_at bigint NOT NULL,
       PRIMARY KEY (inbox_id, epoch))""",
)

# Version 4: durable runs. The agent's state, one row per version (the newest is
# the state; older ones are its history, trimmed to keep_state_versions), and
# the journal of steps, one row per KEY.
_V4: tuple[str, ...] = (
    """
CREATE TABLE state_versions (
    inbox_id integer NOT NULL,
    version bigint NOT NULL,                    -- 1, 2, ...; version 0 is {} and has no row
    state text NOT NULL,                        -- canonical JSON object
    updated_at bigint NOT NULL,
    generation bigint,                          -- the lease generation that wrote it
    author text NOT NULL,                       -- run | operator
    PRIMARY KEY (inbox_id, version)
)""",
    """
CREATE TABLE steps (
    inbox_id integer NOT NULL,
    key text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL
        CHECK (status IN ('started', 'done', 'failed', 'uncertain')),
    attempts bigint NOT NULL,                   -- tries started
    generation bigint NOT NULL,                 -- the lease generation of the last try
    started_at bigint NOT NULL,
    finished_at bigint,
    exit_code bigint,
    output bytea,                               -- a done step's stdout
    error text,
    PRIMARY KEY (inbox_id, key)
)""",
    "CREATE INDEX steps_by_status ON steps (inbox_id, status, finished_at)",
)

# Version 5: governed runs (see the SQLite schema's version 12): the pause in force and
# the breaker's streak per inbox, and what each run's answer said it spent; the channel
# of every message and dispatch (`default` for the rows written before).
_V5: tuple[str, ...] = (
    """
CREATE TABLE pauses (
    inbox_id integer PRIMARY KEY,
    kind text COLLATE "C" CHECK (kind IN ('breaker', 'budget')),
    reason text,
    since bigint,
    until bigint,
    streak bigint NOT NULL DEFAULT 0,
    streak_event bigint,
    streak_distinct boolean NOT NULL DEFAULT false,
    waived_until bigint
)""",
    """
CREATE TABLE run_usage (
    inbox_id integer NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    at bigint NOT NULL,
    generation bigint,
    events text NOT NULL,
    tokens bigint,
    cost double precision,
    PRIMARY KEY (inbox_id, id)
)""",
    "CREATE INDEX run_usage_by_time ON run_usage (inbox_id, at)",
    """ALTER TABLE outbox ADD COLUMN channel text COLLATE "C" NOT NULL DEFAULT 'default'""",
    """ALTER TABLE dispatches ADD COLUMN channel text COLLATE "C" NOT NULL DEFAULT 'default'""",
    "CREATE INDEX dispatches_by_channel ON dispatches (inbox_id, channel, state, claimed_at)",
)

# Version 6: the events a claim looks for before fresh ones have an index of their
# own (see the SQLite schema's version 14).
_V6 = ("""CREATE INDEX events_retrying ON events (inbox_id, id)
          WHERE status = 'pending' AND attempts > 0""",)

# Version 7: what runs spent, totalled per quarter of an hour (see the SQLite
# schema's version 15), made for the runs already recorded from their rows.
_V7 = ("""
CREATE TABLE usage_slots (
    inbox_id integer NOT NULL,
    slot bigint NOT NULL,           -- its first second: a multiple of 900
    tokens bigint NOT NULL,
    cost double precision NOT NULL,
    PRIMARY KEY (inbox_id, slot)
)""", """
INSERT INTO usage_slots (inbox_id, slot, tokens, cost)
SELECT inbox_id, at - (at % 900 + 900) % 900, SUM(COALESCE(tokens, 0)),
       SUM(COALESCE(cost, 0.0))
FROM run_usage GROUP BY 1, 2""")

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
SCHEMA_VERSION = len(MIGRATIONS)
