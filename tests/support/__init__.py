"""What the test folders share, each module named for what it holds.

- ``clock``: the simulated clock's starting points and the lease the tests use;
- ``store``: helpers written against the Store protocol alone (a whole run,
  queued messages, what a caller can see, a worker driven step by step);
- ``sqlite`` and ``postgres``: reading a backend's tables directly (dumps,
  real counts), and for PostgreSQL the test server and a fresh schema;
- ``processes``: waiting on, inspecting and cleaning up real processes;
- ``handler`` and ``sending``: the test handler and the recording sender;
- ``watching`` and ``serving``: long-running `--watch` and `serve` processes;
- ``fixtures``: the fixtures every folder gets (tests/conftest.py loads them).

pyproject.toml puts tests/ on ``sys.path``, so every test imports
``support.<module>``; no test folder imports another's.
"""
