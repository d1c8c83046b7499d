"""Channels: each outbox channel's sender, pacing, delivery mode, quiet hours and cap.

A channel is a table ``[channels.NAME]`` of config.toml (a user's
``[users.USER.channels.NAME]`` overrides its keys)::

    [channels.sms]
    sender = ["send-sms", "+15550100"]
    gap = "4h"
    quiet_hours = "22:00-07:00"
    max_per_day = 3

``default`` always exists: the top-level ``sender``, ``outbox_gap`` and
``delivery`` settings, so a config without channels works as before; a
``[channels.default]`` table may override them. A key a channel leaves out is
the top-level setting of the same meaning (``gap`` is ``outbox_gap``); quiet
hours are read in the ``timezone`` setting's zone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbox.errors import BadInput, UsageError
from agentbox.rules.records import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from agentbox.config import Settings
    from agentbox.rules.quiet import Window


def _window(value: Any) -> Window:
    from agentbox.rules.quiet import parse_window

    return parse_window(value)


def _keys() -> dict[str, Callable[[Any], Any]]:
    from agentbox.config import KEYS

    return {"sender": KEYS["sender"].parse, "gap": KEYS["outbox_gap"].parse,
            "delivery": KEYS["delivery"].parse, "quiet_hours": _window,
            "urgent_in_quiet_hours": KEYS["auto_prune"].parse,  # a switch, read the same way
            "max_per_day": KEYS["max_batch"].parse}  # a whole number of at least 1


KEY_HELP = {
    "sender": "the command this channel's messages are piped into (default: `sender`)",
    "gap": "the least time between two sends of this channel (default: `outbox_gap`)",
    "delivery": "at-least-once or at-most-once (default: `delivery`)",
    "quiet_hours": "HH:MM-HH:MM in the inbox's timezone: non-urgent messages wait until "
                   "it ends (default: none)",
    "urgent_in_quiet_hours": "an urgent message goes out in quiet hours too (default true)",
    "max_per_day": "non-urgent sends in a local day; the rest wait for the next (default: "
                   "no cap)",
}


@dataclass(frozen=True)
class Channel:
    name: str
    sender: list[str] | None
    gap: int
    delivery: str
    quiet_hours: Window | None = None
    urgent_in_quiet_hours: bool = True
    max_per_day: int | None = None


def _name(name: str, where: str) -> None:
    from agentbox.rules.keys import check_delivery_key

    try:
        check_delivery_key(name, "-")
    except BadInput as exc:
        raise UsageError(f"{where}: not a channel name: {exc}") from None


def configured(doc: Mapping[str, Any], path: Path, user: str,
               settings: Settings) -> dict[str, Channel]:
    """Every channel ``user`` has, ``default`` first; a bad key is a usage error naming
    its table."""
    from agentbox.sources import tables

    keys = _keys()
    found: dict[str, Channel] = {}
    layers = tables(doc, path, user, "channels")
    for name in [DEFAULT_CHANNEL, *sorted(n for n in layers if n != DEFAULT_CHANNEL)]:
        values: dict[str, Any] = {"sender": settings.sender,
                                  "gap": settings.value("outbox_gap"),
                                  "delivery": settings.value("delivery")}
        for table, where in layers.get(name, []):
            _name(name, f"{path} [{where}]")
            for key, raw in table.items():
                if key not in keys:
                    raise UsageError(f"{path} [{where}]: unknown key {key!r} (known: "
                                     f"{', '.join(keys)})")
                try:
                    values[key] = keys[key](raw)
                except BadInput as exc:
                    raise UsageError(f"{path} [{where}]: {key}: {exc}") from None
        found[name] = Channel(name, **values)
    return found


def resolve(path: Path, user: str, settings: Settings) -> dict[str, Channel]:
    """The channels of ``user`` as config.toml at ``path`` has them."""
    from agentbox.config import load

    return configured(load(path), path, user, settings)


def names(path: Path, user: str) -> frozenset[str]:
    """The channels ``user`` has (``default`` always), their keys left unread: what a
    run checks its answer's messages against."""
    from agentbox.config import load
    from agentbox.sources import tables

    return frozenset({DEFAULT_CHANNEL, *tables(load(path), path, user, "channels")})
