"""The agent's state: versions written by a run's fenced finish or by an operator.

The state moves with the books: :func:`change_in` runs inside the finish
transaction (:meth:`agentbox.ledger.runs.Runs.finish`), so a refused, failed
or malformed finish writes no version. Each write adds a row and trims the
rows older than ``keep_state_versions``; reading the state is one index walk
to the newest row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentbox.ledger import history
from agentbox.ledger.core import Core

if TYPE_CHECKING:
    from agentbox.ledger.engine import Reader, Row, Tx
    from agentbox.rules.policy import Policy
    from agentbox.rules.state import Change, Version

_COLUMNS = "version, state, updated_at, generation, author"


def _version(row: tuple[Any, ...]) -> Version:
    from agentbox.rules.state import Version

    version, state, updated_at, generation, author = row
    return Version(int(version), str(state), int(updated_at),
                   None if generation is None else int(generation), str(author))


# The newest version: the state as it stands.
CURRENT = f"""SELECT {_COLUMNS} FROM state_versions WHERE inbox_id = :box
              ORDER BY version DESC LIMIT 1"""


def current_of(rows: Sequence[Row]) -> Version:
    """The state from the rows :data:`CURRENT` read (version 0, ``{}``, before anything
    wrote one)."""
    from agentbox.rules.state import INITIAL

    return _version(rows[0]) if rows else INITIAL


def current_in(reader: Reader | Tx) -> Version:
    """The state as it stands."""
    return current_of(reader.rows(CURRENT))


def write_in(tx: Tx, text: str, now: int, generation: int | None, author: str,
             policy: Policy) -> int:
    """Write ``text`` (canonical) as the next version, trimming history; the new version."""
    from agentbox.rules.state import first_kept

    row = tx.one("SELECT MAX(version) FROM state_versions WHERE inbox_id = :box")
    version = (0 if row is None or row[0] is None else int(row[0])) + 1
    tx.run("""INSERT INTO state_versions (inbox_id, version, state, updated_at, generation,
                                          author)
              VALUES (:box, :version, :state, :now, :generation, :author)""",
           version=version, state=text, now=now, generation=generation, author=author)
    tx.run("DELETE FROM state_versions WHERE inbox_id = :box AND version < :first",
           first=first_kept(version, policy.keep_state_versions))
    return version


def change_in(tx: Tx, change: Change | None, now: int, generation: int,
              policy: Policy | None) -> None:
    """Apply an answer's state change inside the finish's transaction (nothing for None).

    A state over ``max_state`` raises BadInput: the finish writes nothing and
    the run fails, as for any malformed answer.
    """
    if change is None:
        return
    from agentbox.rules.policy import Policy
    from agentbox.rules.state import new_state

    policy = policy or Policy()
    text = new_state(lambda: current_in(tx).value(), change, policy.max_state)
    write_in(tx, text, now, generation, "run", policy)


class State(Core):
    """The agent's state: read it, list its kept versions, set it as an operator."""

    def state(self) -> Version:
        """The state as it stands."""
        return current_in(self._read())

    def state_history(self) -> list[Version]:
        """The kept versions, newest first."""
        rows = self._read().rows(f"""SELECT {_COLUMNS} FROM state_versions
                                     WHERE inbox_id = :box ORDER BY version DESC""")
        return [_version(row) for row in rows]

    def set_state(self, holder: str, generation: int, now: int, value: dict[str, Any],
                  policy: Policy) -> int | None:
        """Replace the state as an operator, under a lease taken for it (fenced like a
        finish); the new version, or None when the lease is no longer ``holder``'s."""
        from agentbox.rules.lease import holds
        from agentbox.rules.state import state_text

        text = state_text(value, policy.max_state)
        with self._locked() as (tx, lease):
            if not holds(lease, holder, generation, now):
                return None
            version = write_in(tx, text, now, generation, "operator", policy)
            history.record(tx, now, "state", version, "set", generation, "by an operator")
            return version
