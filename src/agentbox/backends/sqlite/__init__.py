"""The SQLite backend: one user's inbox in one file.

Only what the engine does its own way lives here: opening, checking and
migrating a file (``db``, ``schema``), the engine the ledger writes through
(``engine``: ``BEGIN IMMEDIATE`` transactions, the one-statement ingest),
waking watchers (``wake``), every inbox of a folder (``inboxes``) and looking
after the file (``upkeep``).
"""
