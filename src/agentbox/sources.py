"""Webhook sources for ``agentbox serve``: the ``[sources.NAME]`` tables of config.toml.

A source no table names is served with the defaults: its delivery id from the
``Idempotency-Key`` header, no signature. A table says where the id is (a
header, ``id_header``, or a field of the JSON body, ``id_field``) and which
signature every delivery must carry. A preset fills both in for a sender
whose habits are fixed; the secret is never part of it::

    [sources.github]
    preset = "github"             # X-GitHub-Delivery, X-Hub-Signature-256
    secret_env = "GITHUB_WEBHOOK_SECRET"

    [sources.stripe]
    preset = "stripe"             # the body's "id", Stripe-Signature within 5m
    secret_env = "STRIPE_WEBHOOK_SECRET"

Tables under ``[users.USER.sources.NAME]`` are that user's and their keys
win. A key written in any table wins over the preset. The id has one place:
the most specific table that names ``id_header`` or ``id_field`` decides it,
so a user's ``id_field`` replaces a shared ``id_header`` instead of clashing
with it; one table naming both is an error.

Each value is checked alone when it is written (``config set``) and read;
how the keys fit together (a signature needs its secret) is checked when
the tables are read, because a table is written one key at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from agentbox.errors import BadInput, UsageError

DEFAULT_ID_HEADER = "Idempotency-Key"
PRESETS: dict[str, dict[str, str]] = {
    "github": {"id_header": "X-GitHub-Delivery", "signature": "github"},
    "stripe": {"id_field": "id", "signature": "stripe"},
}
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789"
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")  # an HTTP header name
_ID_PLACES = ("id_header", "id_field")


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BadInput("must be a non-empty string")
    return value


def _header(value: Any) -> str:
    if not set(_text(value)) <= _TOKEN:
        raise BadInput(f"{value!r} is not an HTTP header name")
    return str(value)


def _field(value: Any) -> str:
    if not all(_text(value).split(".")):
        raise BadInput(f"{value!r} is not a field name or a dotted path of them (a.b)")
    return str(value)


def _one_of(choices: Collection[str]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise BadInput(f"must be one of {', '.join(choices)}, not {value!r}")
        return str(value)

    return check


def _tolerance(value: Any) -> int:
    from agentbox.durations import parse_duration

    return parse_duration(value)


class Key(NamedTuple):
    parse: Callable[[Any], Any]
    help: str


def _kind(value: Any) -> str:
    from agentbox.signatures import KINDS

    return _one_of(KINDS)(value)


KEYS: dict[str, Key] = {
    "preset": Key(_one_of(tuple(PRESETS)), "github or stripe: the sender's id place and "
                  "signature (secret_env is still needed)"),
    "id_header": Key(_header, "the header holding the delivery id"),
    "id_field": Key(_field, "the field of the JSON body holding the delivery id, instead of a "
                    "header (a.b: field b of object a)"),
    "secret_env": Key(_text, "the environment variable holding the signing secret; a valid "
                      "signature is then required"),
    "signature": Key(_kind, "github, stripe or hmac-sha256"),
    "signature_header": Key(_header, "the header holding the signature"),
    "tolerance": Key(_tolerance, "how far a stripe signature's timestamp may be from now"),
}


class Source(NamedTuple):
    """How ``agentbox serve`` takes deliveries for one source; exactly one id place is set."""

    id_header: str | None = DEFAULT_ID_HEADER
    id_field: str | None = None  # a dotted path into the JSON body
    secret_env: str | None = None  # when set, a valid signature is required
    signature: str | None = None  # github | stripe | hmac-sha256
    signature_header: str | None = None
    tolerance: int | None = None  # seconds, for a stripe signature (set for it alone)


class Setting(NamedTuple):
    """One key of a source in force: its value, where it comes from, and as written."""

    value: Any
    origin: str  # "default", "preset NAME", "config [sources.NAME]" or "config [users.U.…]"
    written: Any = None


Table = tuple[Mapping[str, Any], str]  # a table's keys, and its name: "users.U.sources.NAME"


def tables(doc: Mapping[str, Any], path: Path, user: str,
           kind: str = "sources") -> dict[str, list[Table]]:
    """Every source (or, with ``kind="channels"``, channel) named in ``doc``, with its
    tables from the shared one to the user's."""
    found: dict[str, list[Table]] = {}
    users = doc.get("users", {})
    mine = users.get(user, {}) if isinstance(users, dict) else {}
    for table, prefix in ((doc.get(kind, {}), ""),
                          (mine.get(kind, {}) if isinstance(mine, dict) else {},
                           f"users.{user}.")):
        if not isinstance(table, dict):
            raise UsageError(f"{path} [{prefix}{kind}] must be a table of per-{kind[:-1]} "
                             "tables")
        for name, values in table.items():
            if not isinstance(values, dict):
                raise UsageError(f"{path} [{prefix}{kind}.{name}] must be a table")
            found.setdefault(name, []).append((values, f"{prefix}{kind}.{name}"))
    return found


def resolve(name: str, layers: list[Table], path: Path) -> tuple[Source, dict[str, Setting]]:
    """The source ``name`` as its tables make it, and each key in force; a bad one is a
    usage error naming its table."""
    from agentbox.signatures import HEADERS

    where = f"{path} [sources.{name}]"
    check_name(name, where)
    given: dict[str, Setting] = {}
    for values, table in layers:
        for key, raw in values.items():
            given[key] = Setting(parse_value(key, raw, f"{path} [{table}]"), f"config [{table}]",
                                 raw)
        if any(key in values for key in _ID_PLACES):
            for key in _ID_PLACES:
                if key not in values:
                    given.pop(key, None)
    if all(key in given for key in _ID_PLACES):
        raise UsageError(f"{where}: id_header and id_field are two places for one id; "
                         "give one")
    preset = given["preset"].value if "preset" in given else None
    settings = {key: Setting(value, f"preset {preset}")
                for key, value in PRESETS.get(preset or "", {}).items()}
    if any(key in given for key in _ID_PLACES):
        for key in _ID_PLACES:
            settings.pop(key, None)
    settings.update(given)
    if not any(key in settings for key in _ID_PLACES):
        settings["id_header"] = Setting(DEFAULT_ID_HEADER, "default")
    kind = settings["signature"].value if "signature" in settings else None
    if kind is not None and "secret_env" not in settings:
        raise UsageError(f"{where}: " + (f"preset {preset} needs secret_env, the variable "
                                         "holding the sender's signing secret"
                                         if "signature" not in given else
                                         "signature and secret_env go together"))
    if kind is None and "secret_env" in settings:
        raise UsageError(f"{where}: signature and secret_env go together")
    if kind in HEADERS and "signature_header" not in settings:
        settings["signature_header"] = Setting(HEADERS[kind], "default")
    if kind is not None and "signature_header" not in settings:
        raise UsageError(f"{where}: signature {kind} needs signature_header, the header "
                         "its sender puts the signature in")
    if "tolerance" in settings and kind != "stripe":
        raise UsageError(f"{where}: tolerance is for signature = \"stripe\" only")
    if kind == "stripe" and "tolerance" not in settings:
        from agentbox.signatures import STRIPE_TOLERANCE

        settings["tolerance"] = Setting(STRIPE_TOLERANCE, "default")
    value = {key: setting.value for key, setting in settings.items()}
    source = Source(value.get("id_header"), value.get("id_field"), value.get("secret_env"), kind,
                    value.get("signature_header"), value.get("tolerance"))
    return source, {key: settings[key] for key in KEYS if key in settings}


def parse_value(key: str, raw: Any, where: str) -> Any:
    """One key's value checked alone, as read and as written; a bad one is a usage error."""
    if key not in KEYS:
        raise UsageError(f"{where}: unknown setting {key!r} (known: {', '.join(KEYS)})")
    try:
        return KEYS[key].parse(raw)
    except BadInput as exc:
        raise UsageError(f"{where}: {key} {exc}") from None


def configured(doc: Mapping[str, Any], path: Path, user: str) -> dict[str, Source]:
    """The sources config.toml (``doc``, read from ``path``) names for ``user``, checked;
    a bad one is a usage error."""
    return {name: resolve(name, layers, path)[0]
            for name, layers in tables(doc, path, user).items()}


def in_force(doc: Mapping[str, Any], path: Path, user: str) -> dict[str, dict[str, Setting]]:
    """Per source ``doc`` names for ``user``, every key in force: what `config show` lists."""
    return {name: resolve(name, layers, path)[1]
            for name, layers in tables(doc, path, user).items()}


def check_name(name: str, where: str) -> None:
    """Refuse a source no delivery may use (agentbox's own, or no key); a usage error."""
    from agentbox.rules.keys import check_delivery_key

    try:
        check_delivery_key(name, "-")
    except BadInput as exc:
        raise UsageError(f"{where}: {exc}") from None
