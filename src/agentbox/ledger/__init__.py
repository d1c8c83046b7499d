"""The ledger: every transaction agentbox keeps, written once, over any engine.

:class:`~agentbox.ledger.store.Store` is the inbox as everything above sees it;
:mod:`agentbox.ledger.engine` is the seam a backend implements. The ledger
imports no backend: a backend plugs an engine in (see :mod:`agentbox.location`).
"""
