"""The PostgreSQL backend: every user's inbox in one database, one schema.

Each module owns the SQL of one concern (lease and the inbox lock, inbox,
runs, timers, approvals, outbox, history) and applies the decisions of
:mod:`agentbox.rules` inside a transaction holding the inbox's row lock
(ingest alone takes none); :mod:`.store` puts them behind the
:class:`agentbox.store.Store` protocol and translates psycopg errors.
Needs the optional extra ``postgres`` (psycopg 3; docs/install.md).
"""
