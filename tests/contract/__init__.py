"""The Store contract suite: every backend must pass it unchanged (see conftest.py)."""
