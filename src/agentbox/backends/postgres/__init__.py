"""The PostgreSQL backend: every user's inbox in one database, one schema.

Only what the engine does its own way lives here: sessions, the schema and
its migrations, and errors (``db``, ``schema``), the engine the ledger writes
through (``engine``: transactions that lock the inbox's row, the one-statement
ingest that counts and wakes), the URL, free of psycopg (``url``), waking
watchers with LISTEN/NOTIFY (``wake``), every inbox of a schema (``inboxes``),
and the schema's health (``upkeep``). Needs the optional extra ``postgres``.
"""
