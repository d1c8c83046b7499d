"""The SQLite backend: one user's inbox in one file.

Each module owns the SQL of one concern (lease, inbox, timers, approvals,
outbox, history) and applies the decisions of :mod:`agentbox.rules` inside a
``BEGIN IMMEDIATE`` transaction; :mod:`.store` puts them behind the
:class:`agentbox.store.Store` protocol and translates sqlite3 errors.
"""
