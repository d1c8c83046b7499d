"""The agent's state: one JSON object per inbox, replaced or merged by a run's answer.

An answer carries either the whole new object (``state``) or an RFC 7396 JSON
merge patch (``state_patch``). The merge is written here by hand: it is a
dozen lines of the RFC's own pseudocode, and the maintained packages that
offer it either pull in a JSON Pointer stack for RFC 6902 or have not seen a
release in years. Sizes are counted on the canonical spelling, the one that
is stored, so a bound means the same whatever whitespace a handler prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from agentbox.errors import BadInput
from agentbox.jsonutil import canonical_object

EMPTY = "{}"  # the state of an inbox no finish has written yet, version 0


class Change(NamedTuple):
    """What an answer does to the state: replace it whole, or merge a patch into it."""

    replace: dict[str, Any] | None = None
    patch: dict[str, Any] | None = None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: ``patch`` applied to ``target`` (neither is changed)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def new_state(current: Callable[[], dict[str, Any]], change: Change, max_state: int) -> str:
    """The canonical text of the state after ``change``; BadInput (a malformed answer)
    when it is larger than ``max_state`` bytes. ``current`` is read only for a patch: a
    whole new state need not parse the old one."""
    return state_text(change.replace if change.replace is not None
                      else merge_patch(current(), change.patch), max_state)


def state_text(value: dict[str, Any], max_state: int) -> str:
    """The canonical text of a whole new state; BadInput when over ``max_state`` bytes."""
    text = canonical_object(value, "the state")
    size = len(text.encode("utf-8"))
    if size > max_state:
        raise BadInput(f"the state would be {size} bytes, over the {max_state}-byte "
                       "limit (max_state)")
    return text


def first_kept(version: int, keep: int) -> int:
    """The oldest version history keeps once ``version`` is written."""
    return max(0, version - keep + 1)


class Version(NamedTuple):
    """One version of the state: the newest is the state, older ones its history."""

    version: int
    state: str  # canonical JSON object
    updated_at: int | None  # None for version 0, which nothing wrote
    generation: int | None
    author: str | None  # "run" (a finish) or "operator" (`state set`)

    def value(self) -> dict[str, Any]:
        import json

        loaded: dict[str, Any] = json.loads(self.state)
        return loaded

    def document(self) -> dict[str, Any]:
        """``state --json``: {"version", "state", "updated_at", "generation"}, and who wrote it."""
        return {"version": self.version, "state": self.value(), "updated_at": self.updated_at,
                "generation": self.generation, "author": self.author}


INITIAL = Version(0, EMPTY, None, None, None)
