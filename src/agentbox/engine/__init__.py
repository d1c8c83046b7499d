"""The engine: every rule of agentbox, as functions over an SQLite connection.

Nothing here knows about Typer, rich or the process clock: each function takes
a connection and ``now`` (integer Unix seconds), so the commands, the scenario
runner and the tests all drive the same code.
"""
