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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentbox.errors import BadInput, UsageError
from agentbox.rules.records import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from agentbox.rules.quiet import Window
    from agentbox.sources import Setting, Table


class TopLevel(Protocol):
    """The top-level settings a channel falls back on and reads its keys as: what
    :class:`agentbox.config.Settings` is to this module (named here, not imported, as
    config reads the channels' tables for its commands)."""

    @property
    def sender(self) -> list[str] | None: ...

    def value(self, key: str) -> Any: ...

    def parse(self, key: str, raw: Any) -> Any: ...


def window(value: Any) -> Window:
    """A ``quiet_hours`` value read (BadInput when it is none)."""
    from agentbox.rules.quiet import parse_window

    return parse_window(value)


# A channel's key and the top-level setting it stands in for (and is read as).
SAME_AS = {"sender": "sender", "gap": "outbox_gap", "delivery": "delivery",
           "urgent_in_quiet_hours": "auto_prune",  # a switch, read the same way
           "max_per_day": "max_batch"}  # a whole number of at least 1


def parse_key(key: str, raw: Any, top: TopLevel) -> Any:
    """One key of a channel read (BadInput when it is no such value)."""
    return window(raw) if key == "quiet_hours" else top.parse(SAME_AS[key], raw)


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


DEFAULTS: dict[str, Any] = {"quiet_hours": None, "urgent_in_quiet_hours": True,
                           "max_per_day": None}  # the keys no top-level setting stands for


@dataclass(frozen=True)
class Channel:
    name: str
    sender: list[str] | None
    gap: int
    delivery: str
    quiet_hours: Window | None
    urgent_in_quiet_hours: bool
    max_per_day: int | None


def check_name(name: str, where: str) -> None:
    from agentbox.rules.keys import check_delivery_key

    try:
        check_delivery_key(name, "-")
    except BadInput as exc:
        raise UsageError(f"{where}: not a channel name: {exc}") from None


def keys_in_force(name: str, layers: list[Table], path: Path,
                  settings: TopLevel) -> dict[str, Setting]:
    """Each key of channel ``name`` in force: from its tables (the user's last), else
    the top-level setting it stands in for (``gap`` is ``outbox_gap``), else none. A
    bad key is a usage error naming its table."""
    from agentbox.sources import Setting

    found = {"sender": Setting(settings.sender, "setting sender")}
    for key in ("gap", "delivery"):
        found[key] = Setting(settings.value(SAME_AS[key]), f"setting {SAME_AS[key]}")
    found.update((key, Setting(value, "default")) for key, value in DEFAULTS.items())
    for table, where in layers:
        check_name(name, f"{path} [{where}]")
        for key, raw in table.items():
            if key not in KEY_HELP:
                raise UsageError(f"{path} [{where}]: unknown key {key!r} (known: "
                                 f"{', '.join(KEY_HELP)})")
            try:
                found[key] = Setting(parse_key(key, raw, settings), f"config [{where}]", raw)
            except BadInput as exc:
                raise UsageError(f"{path} [{where}]: {key}: {exc}") from None
    return found


def in_force(doc: Mapping[str, Any], path: Path, user: str,
             settings: TopLevel) -> dict[str, dict[str, Setting]]:
    """Every channel ``user`` has, ``default`` first, with each key in force."""
    from agentbox.sources import tables

    layers = tables(doc, path, user, "channels")
    return {name: keys_in_force(name, layers.get(name, []), path, settings)
            for name in [DEFAULT_CHANNEL, *sorted(n for n in layers if n != DEFAULT_CHANNEL)]}


def configured(doc: Mapping[str, Any], path: Path, user: str,
               settings: TopLevel) -> dict[str, Channel]:
    """Every channel ``user`` has, ``default`` first; a bad key is a usage error naming
    its table."""
    return {name: Channel(name, **{key: setting.value for key, setting in keys.items()})
            for name, keys in in_force(doc, path, user, settings).items()}


def names(doc: Mapping[str, Any], path: Path, user: str) -> frozenset[str]:
    """The channels ``user`` has in config.toml ``doc`` read from ``path`` (``default``
    always), their keys left unread: what a run checks its answer's messages against."""
    from agentbox.sources import tables

    return frozenset({DEFAULT_CHANNEL, *tables(doc, path, user, "channels")})
