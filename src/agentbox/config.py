"""Settings: flags override config, config overrides defaults.

``config.toml`` holds defaults for every user at its top level and per-user
tables under ``[users.NAME]``::

    max_attempts = 5
    [users.alice]
    handler = ["python3", "/home/alice/agent.py"]
    outbox_gap = "30m"

Durations may be written as seconds or as ``90s``/``15m``/``4h``/``1d``.
Commands (``handler``, ``sender``) are argv lists, or strings split like a
shell would split them (no shell ever runs them).

A key agentbox does not know is a warning, never a stop: a typo must not make
every command fail, least of all ``ingest``, whose webhook would drop its
delivery. A bad value of a known key stops only a command that reads that
key (see :class:`Settings`). ``doctor`` reports both (:func:`findings`).

Webhook sources for ``agentbox serve`` are tables ``[sources.NAME]`` (and
``[users.USER.sources.NAME]``, whose keys win), read by :mod:`agentbox.sources`;
outbox channels likewise ``[channels.NAME]``, read by :mod:`agentbox.channels`.
Their keys are named ``sources.NAME.KEY`` and ``channels.NAME.KEY`` here, for
``config get|set|unset``.
"""

import contextlib
import os
import re
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from agentbox.errors import AgentboxError, BadInput, Busy, UsageError
from agentbox.rules.policy import Policy


def _seconds(value: Any, allow_zero: bool = False) -> int:
    if allow_zero and value in (0, "0"):
        return 0
    from agentbox.durations import parse_duration  # only for a setting that is written

    return parse_duration(value)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadInput(f"expected a whole number, not {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise BadInput(f"expected a whole number, not {value!r}") from None
    if number < 1:
        raise BadInput(f"expected a number of at least 1, not {value!r}")
    return number


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _flag(value: Any) -> bool:
    """A switch: TOML true/false, or one of the words `config set` stores as text."""
    if isinstance(value, bool):
        return value
    spelled = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if spelled in _TRUE:
        return True
    if spelled in _FALSE:
        return False
    raise BadInput(f"expected true or false, not {value!r}")


def _amount(value: Any) -> float:
    """A positive amount of money (any currency: agentbox only adds the answers' costs)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(f"expected a positive number, not {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise BadInput(f"expected a positive number, not {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise BadInput(f"expected a positive number, not {value!r}")
    return number


def _mode(value: Any) -> str:
    from agentbox.rules.outbox import check_mode

    check_mode(str(value))
    return str(value)


def _step_mode(value: Any) -> str:
    from agentbox.rules.steps import check_mode

    try:
        return check_mode(str(value))
    except UsageError as exc:
        raise BadInput(str(exc)) from None


def parse_command(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            import shlex  # only for a command given as one string

            argv = shlex.split(value)
        except ValueError as exc:
            raise BadInput(f"cannot split command {value!r}: {exc}") from None
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        argv = list(value)
    else:
        raise BadInput("a command is a string or a list of strings")
    if not argv:
        raise BadInput("a command cannot be empty")
    return argv


def _database(value: Any) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise BadInput("database is a file path or a postgresql:// URL")
    return value


_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*", re.ASCII)


def _zone_name(value: Any) -> str:
    """A time zone name. Whether the zone exists is checked where it is used (and by
    ``config set``), so reading the config never loads the zone database."""
    if not isinstance(value, str) or not _ZONE_NAME.fullmatch(value):
        raise BadInput(f"not a time zone name: {value!r} (use an IANA name such as "
                       "Europe/Berlin or UTC)")
    return value


def _known_zone(value: Any) -> None:
    from agentbox.calendar import zone

    zone(value)


def _public_url(value: Any) -> str:
    from agentbox.rules.links import check_public_url

    if not isinstance(value, str):
        raise BadInput(f"public_url is a URL, not {value!r}")
    return check_public_url(value)


MIN_CONSOLE_TOKEN = 16  # characters: a guessable console token guards nothing


def _console_token(value: Any) -> str:
    if not isinstance(value, str) or len(value) < MIN_CONSOLE_TOKEN \
            or not value.isascii() or not value.isprintable() or " " in value:
        raise BadInput(f"console_token is at least {MIN_CONSOLE_TOKEN} printable ASCII "
                       "characters without spaces (e.g. from `openssl rand -hex 16`)")
    return value


class Key(NamedTuple):
    parse: Callable[[Any], Any]
    help: str  # what it does; its default is Policy's, shown by :func:`described`
    # A fuller check made when the value is set, too costly to repeat on every read.
    check: Callable[[Any], None] | None = None
    duration: bool = False  # a number of seconds, shown as a duration
    secret: bool = False  # `config show` says whether it is set, never what it is


def _duration_key(help: str, allow_zero: bool = False) -> Key:
    return Key(lambda v: _seconds(v, allow_zero), help, duration=True)


KEYS: dict[str, Key] = {
    "lease_ttl": _duration_key("seconds a worker owns the inbox without renewing"),
    "max_attempts": Key(_count, "claims before an event is parked as dead"),
    "outbox_gap": _duration_key("minimum time between two sends"),
    "retry_backoff": _duration_key("base of the exponential retry backoff; 0 turns it off",
                                   allow_zero=True),
    "backoff_cap": _duration_key("the longest a retry is held back"),
    "max_batch": Key(_count, "events handed to one run"),
    "max_payload": Key(_count, "largest accepted payload in bytes"),
    "handler_timeout": _duration_key("seconds before a handler is stopped"),
    "send_timeout": _duration_key("seconds before a sender is stopped"),
    "delivery": Key(_mode, "at-least-once or at-most-once"),
    "catch_up_limit": Key(_count, "events per missed-occurrence burst of an `each` timer"),
    "max_send_tries": Key(_count, "tries of one dispatch key, once it may have delivered, "
                          "before it is parked uncertain"),
    "keep_done": _duration_key("prune done events older than this"),
    "keep_sent": _duration_key("prune sent messages and settled dispatches older than this"),
    "dedupe_window": _duration_key("how long after its arrival a pruned event's key still "
                                   "refuses a redelivery; 0 forgets it when pruned",
                                   allow_zero=True),
    "auto_prune": Key(_flag, "`run` prunes at most once a day"),
    "max_state": Key(_count, "largest agent state in bytes (canonical JSON)"),
    "keep_state_versions": Key(_count, "versions of the agent's state `state history` keeps"),
    "max_step_output": Key(_count, "bytes of a done step's stdout kept as its result"),
    "step_mode": Key(_step_mode, "a step that died inside: at-least-once runs it again, "
                     "at-most-once parks it uncertain"),
    "breaker_runs": Key(_count, "failed runs in a row, over at least two events, that "
                        "pause the inbox (reason `handler failing`)"),
    "breaker_cooldown": _duration_key("how long a tripped breaker waits before one probe run"),
    "budget_tokens_per_day": Key(_count, "tokens the answers may report in a local day before "
                                 "the inbox pauses (default: no budget)"),
    "budget_cost_per_day": Key(_amount, "cost the answers may report in a local day before "
                               "the inbox pauses (default: no budget)"),
    "handler": Key(parse_command, "the agent command `agentbox run` starts"),
    "sender": Key(parse_command, "the command `agentbox dispatch` pipes messages into"),
    "database": Key(_database, "where inboxes live: a SQLite file or a postgresql:// URL "
                               "(one file per user under the data folder)"),
    "timezone": Key(_zone_name, "zone of cron timers and of times written without one "
                    "(TZ, else the system's)", check=_known_zone),
    "public_url": Key(_public_url, "where people reach `agentbox serve` "
                      "(https://host/...): approval links are PUBLIC_URL/a/TOKEN; unset, "
                      "there are none"),
    "console_token": Key(_console_token, "the secret `agentbox console` asks for (bearer "
                         "header or its login form); required on any address but loopback",
                         secret=True),
}
_POLICY_FIELDS = set(Policy._fields)


def described(key: str) -> str:
    """A setting's help and, for a rule's knob, its default, read from :class:`Policy`:
    the one place the defaults are written."""
    from agentbox.durations import format_duration

    known = KEYS[key]
    default = getattr(Policy(), key, None)
    if key not in _POLICY_FIELDS or default is None:
        return known.help
    shown = (format_duration(default) if known.duration and default
             else str(default).lower() if isinstance(default, bool) else str(default))
    return f"{known.help} (default {shown})"


class Settings:
    """The settings in force for one user, each with where it came from.

    A value config.toml spells wrong is kept as its problem, and reading that
    key (alone, or as part of :attr:`policy`) raises it as a usage error: a
    bad ``outbox_gap`` stops ``dispatch`` and ``run``, not ``ingest``.
    """

    def __init__(self, values: Mapping[str, Any], problems: Mapping[str, str],
                 origins: dict[str, str]) -> None:
        self._values = dict(values)
        self.problems = dict(problems)  # key -> the one line that says what is wrong
        self.origins = origins  # key -> "default" | "config" | "config [users.NAME]" | "flag"

    def value(self, key: str) -> Any:
        """The value in force for one of :data:`KEYS`; a usage error if it is written wrong."""
        problem = self.problems.get(key)
        if problem is not None:
            raise UsageError(problem)
        return self._values.get(key, getattr(_DEFAULTS, key, None))

    @staticmethod
    def parse(key: str, raw: Any) -> Any:
        """``raw`` read as the setting ``key`` reads it (BadInput when it is no such
        value): how a channel's key is read as the setting it stands in for."""
        return KEYS[key].parse(raw)

    @property
    def policy(self) -> Policy:
        """Every rule's knob: the rules take them together, so any bad one stops."""
        return Policy(**{key: self.value(key) for key in Policy._fields})

    @property
    def handler(self) -> list[str] | None:
        return self.value("handler")  # type: ignore[no-any-return]

    @property
    def sender(self) -> list[str] | None:
        return self.value("sender")  # type: ignore[no-any-return]

    @property
    def database(self) -> str | None:
        return self.value("database")  # type: ignore[no-any-return]

    @property
    def timezone(self) -> str | None:
        return self.value("timezone")  # type: ignore[no-any-return]

    @property
    def public_url(self) -> str | None:
        return self.value("public_url")  # type: ignore[no-any-return]

    @property
    def console_token(self) -> str | None:
        return self.value("console_token")  # type: ignore[no-any-return]


_DEFAULTS = Policy()


class Lookup(NamedTuple):
    """One setting for one user: what is in force, where from, and as written."""

    key: str
    value: Any
    origin: str
    written: Any  # the value as config.toml spells it ("30m"); None when the default stands


def load(path: Path) -> dict[str, Any]:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; no config, no tomllib import
    except (FileNotFoundError, NotADirectoryError):  # no config file: every default stands
        return {}
    except OSError as exc:
        raise UsageError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    import tomllib

    try:
        with fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read config: {exc}") from None


def parse_settings(table: Mapping[str, Any], where: str,
                   known: Collection[str] = tuple(KEYS)) -> dict[str, Any]:
    """Every setting of ``table`` checked and parsed; a problem names ``where`` and the key.

    For scenario files, which are checked whole, so an unknown key is an error
    there. config.toml reads each key by itself (:func:`_read`); both parse a
    value with :func:`_parse`, so it means the same in both.
    """
    parsed = {}
    for key, raw in table.items():
        if key not in known:
            raise BadInput(f"{where}: unknown setting {key!r} (known: {', '.join(known)})")
        parsed[key] = _parse(key, raw, where)
    return parsed


def _parse(key: str, raw: Any, where: str) -> Any:
    try:
        return KEYS[key].parse(raw)
    except BadInput as exc:
        raise BadInput(f"{where}: {key}: {exc}") from None


_TABLES = ("users", "sources", "channels")  # tables of config.toml that hold no setting


class _Table(NamedTuple):
    values: dict[str, Any]
    problems: dict[str, str]  # a known key written wrong -> what is wrong
    unknown: list[str]  # what to say of each key agentbox does not know


def _read(table: Mapping[str, Any], where: str) -> _Table:
    """One table of config.toml, each key by itself: a bad one spoils no other."""
    read = _Table({}, {}, [])
    for key, raw in table.items():
        if key in _TABLES:
            continue
        if key not in KEYS:
            import difflib  # only for a config with a typo

            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; see `agentbox config show`"
            read.unknown.append(f"{where}: unknown setting {key!r} is ignored{hint}")
            continue
        try:
            read.values[key] = _parse(key, raw, where)
        except BadInput as exc:
            read.problems[key] = str(exc)
    return read


class ConfigWarning(UserWarning):
    """A setting of config.toml that agentbox ignores (an unknown key)."""


_warned: set[str] = set()  # said once per process, however often the config is read


def _layer(table: Mapping[str, Any], where: str) -> _Table:
    """One table of config.toml, its unknown keys each warned about once, as a
    :class:`ConfigWarning` (the CLI shows it as one line on stderr)."""
    read = _read(table, where)
    for line in read.unknown:
        if line not in _warned:
            _warned.add(line)
            import warnings

            warnings.warn(line, ConfigWarning, stacklevel=2)
    return read


def findings(path: Path) -> list[str]:
    """Everything wrong in config.toml, every user's table included (for ``doctor``)."""
    try:
        doc = load(path)
        users = doc.get("users", {})
        if not isinstance(users, dict):
            raise UsageError(f"{path}: [users] must be a table of per-user tables")
        tables = [(doc, str(path))] + [(_table(doc, path, name), f"{path} [users.{name}]")
                                       for name in users]
    except UsageError as exc:
        return [str(exc)]
    found: list[str] = []
    for table, where in tables:
        read = _read(table, where)
        found += read.unknown + list(read.problems.values())
    return list(dict.fromkeys(found + _named_findings(doc, path, list(users))))


def _named_findings(doc: dict[str, Any], path: Path, users: list[str]) -> list[str]:
    """What is wrong in the ``[sources.NAME]`` and ``[channels.NAME]`` tables, shared
    (read as for a user with no table of their own) and each user's: what `serve`,
    `run` and `dispatch` would stop on."""
    from agentbox import channels, sources

    def read_sources(user: str) -> object:
        return sources.in_force(doc, path, user)

    def read_channels(user: str) -> object:
        return channels.configured(doc, path, user, _resolve(doc, path, user))

    found = []
    for user in ["", *users]:  # "" names no user: the shared tables alone
        for read in (read_sources, read_channels):
            try:
                read(user)
            except UsageError as exc:
                found.append(str(exc))
    return found


def resolve(path: Path, user: str, flags: Mapping[str, Any] | None = None) -> Settings:
    """The settings in force for ``user``: defaults < config < per-user config < flags."""
    return _resolve(load(path), path, user, flags)


def _resolve(doc: dict[str, Any], path: Path, user: str,
             flags: Mapping[str, Any] | None = None) -> Settings:
    mine = _table(doc, path, user)
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    origins = {key: "default" for key in KEYS}
    for layer, origin in ((_layer(doc, str(path)), "config"),
                          (_layer(mine, f"{path} [users.{user}]"), f"config [users.{user}]"),
                          (_Table(given, {}, []), "flag")):
        for key in layer.values.keys() | layer.problems.keys():  # a later layer wins, good or bad
            values.pop(key, None)
            problems.pop(key, None)
            origins[key] = origin
        values.update(layer.values)
        problems.update(layer.problems)
    return Settings(values, problems, origins)


NAMED = ("sources", "channels")  # tables of per-NAME tables whose keys config names


def split_named(dotted: str) -> tuple[str, str, str] | None:
    """``sources.NAME.KEY`` or ``channels.NAME.KEY`` as (kind, NAME, KEY); None for a key
    that begins otherwise. NAME may itself hold dots: KEY, after the last one, never does."""
    kind, _, rest = dotted.partition(".")
    if kind not in NAMED or not rest:
        return None
    name, _, key = rest.rpartition(".")
    if not name or not key:
        raise UsageError(f"{dotted!r}: a {kind[:-1]}'s setting is written {kind}.NAME.KEY "
                         f"(KEY one of {', '.join(_named_keys(kind))})")
    return kind, name, key


def _named_keys(kind: str) -> list[str]:
    from agentbox import channels, sources

    return list(sources.KEYS if kind == "sources" else channels.KEY_HELP)


def _known(key: str) -> None:
    named = split_named(key)
    if named is not None and named[2] not in _named_keys(named[0]):
        raise UsageError(f"unknown setting {named[2]!r} of a {named[0][:-1]}; known: "
                         f"{', '.join(_named_keys(named[0]))}")
    if named is None and key not in KEYS:
        raise UsageError(f"unknown setting {key!r}; known: {', '.join(sorted(KEYS))}, "
                         "and sources.NAME.KEY, channels.NAME.KEY")


def _place(key: str) -> list[str]:
    """Where ``key`` is written in a table: itself, or ``KIND.NAME.KEY`` as three names."""
    named = split_named(key)
    return [key] if named is None else list(named)


def get_value(path: Path, key: str, user: str) -> Lookup:
    """The value of ``key`` in force for ``user``, the layer it comes from, and as written.

    Flags do not enter: this is what a command given no flag would use.
    """
    _known(key)
    doc = load(path)
    place = _place(key)
    if len(place) > 1:
        from agentbox import channels, sources

        kind, name, field = place
        layers = sources.tables(doc, path, user, kind).get(name, [])
        keys = (sources.resolve(name, layers, path)[1] if kind == "sources"
                else channels.keys_in_force(name, layers, path, _resolve(doc, path, user)))
        found = keys.get(field, sources.Setting(None, "default"))
        return Lookup(key, found.value, found.origin, found.written)
    settings = _resolve(doc, path, user)
    origin = settings.origins[key]
    table = _table(doc, path, user) if origin.startswith("config [") else doc
    return Lookup(key, settings.value(key), origin, table.get(key) if origin != "default"
                  else None)


def unset_value(path: Path, key: str, user: str | None) -> bool:
    """Remove ``key`` from ``user``'s table (the top level when None); False if it was not set.

    Scoped like :func:`set_value`, and made under the same lock. Removing a
    key that is not set is not an error (a script may unset to be sure). A
    key agentbox does not know can be removed where it stands, so a typo in
    config.toml can be repaired with the command; elsewhere it is refused.
    A table left empty (a user's, a source's) is removed with it. No config
    file: nothing is made.
    """

    def change(doc: dict[str, Any]) -> bool:
        _table(doc, path, user)  # a [users] that is no table is refused here
        names = ([] if user is None else ["users", user]) + _place(key)
        chain = [doc]  # the tables from the top down to the one holding the key
        for name in names[:-1]:
            inner = chain[-1].get(name)
            if not isinstance(inner, dict):
                break
            chain.append(inner)
        if len(chain) < len(names) or names[-1] not in chain[-1]:
            _known(key)
            return False
        del chain[-1][names[-1]]
        for outer, inner, name in reversed(list(zip(chain, chain[1:], names, strict=False))):
            if inner:
                break
            del outer[name]
        return True

    if not os.path.lexists(path):
        _known(key)
        return False
    return _rewrite(path, change)


_TEXT_KEYS = frozenset({"delivery", "handler", "sender", "database", "timezone", "public_url",
                        "console_token"})  # not numbers
LOCK_WAIT = 10.0  # seconds a writer waits for another one before giving up (exit 75)


def _json_argv(key: str, raw: str) -> list[str]:
    import json

    try:
        argv = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"{key}: a command in [...] is a JSON array of strings: {exc}") from None
    if not isinstance(argv, list) or not all(isinstance(word, str) for word in argv):
        raise UsageError(f"{key}: a command in [...] is a JSON array of strings")
    return argv


def set_value(path: Path, key: str, raw: str, user: str | None) -> Any:
    """Write one setting (for ``user``, or for everyone when None); returns the stored value.

    The value is checked before anything is read or written; the change is
    made under the config lock (see :func:`_rewrite`), so concurrent writers
    never lose each other's changes.
    """
    _known(key)
    place = _place(key)
    try:
        raw.encode("utf-8")  # TOML is UTF-8: an argument in other bytes cannot be kept
    except UnicodeEncodeError:
        raise UsageError(f"{key}: the value is not valid UTF-8") from None
    value = _checked(key, raw) if len(place) == 1 else _checked_named(place[0], place[1],
                                                                       place[2], raw)

    def change(doc: dict[str, Any]) -> bool:
        table = _table(doc, path, user, make=True)
        for name in place[:-1]:
            table = table.setdefault(name, {})
            if not isinstance(table, dict):
                raise UsageError(f"{path}: [{name}] must be a table")
        table[place[-1]] = value
        return True

    _rewrite(path, change)
    return value


def _checked(key: str, raw: str, said: str | None = None) -> Any:
    """``raw`` as ``key`` is stored: a number, a command's argv, or the text; checked.
    Errors name the key as ``said`` (a channel's key read as this setting)."""
    said = said or key
    value: Any = int(raw) if key not in _TEXT_KEYS and raw.isascii() and raw.isdigit() else raw
    if KEYS[key].parse is parse_command and raw.lstrip().startswith("["):
        value = _json_argv(said, raw)  # a command given as a JSON array is kept as a list
    try:
        KEYS[key].parse(value)
        check = KEYS[key].check
        if check is not None:
            check(value)
    except BadInput as exc:
        raise UsageError(f"{said}: {exc}") from None
    return value


def _checked_named(kind: str, name: str, key: str, raw: str) -> Any:
    """``raw`` as a source's or channel's ``key`` is stored, checked: a source's as text
    (a tolerance may be seconds), a channel's as the setting it stands in for."""
    from agentbox import channels, sources

    if kind == "channels":
        channels.check_name(name, f"channels.{name}")
        if key in channels.SAME_AS:
            return _checked(channels.SAME_AS[key], raw, f"channels.{name}.{key}")
        try:
            channels.window(raw)  # quiet_hours: the one key no setting stands in for
        except BadInput as exc:
            raise UsageError(f"channels.{name}.{key}: {exc}") from None
        return raw
    sources.check_name(name, f"sources.{name}")
    value: Any = int(raw) if key == "tolerance" and raw.isascii() and raw.isdigit() else raw
    sources.parse_value(key, value, f"sources.{name}")
    return value


def _table(doc: dict[str, Any], path: Path, user: str | None,
           make: bool = False) -> dict[str, Any]:
    """The top level of ``doc`` (``user`` None) or that user's table, made if asked."""
    if user is None:
        return doc
    users = doc.setdefault("users", {}) if make else doc.get("users", {})
    if not isinstance(users, dict):
        raise UsageError(f"{path}: [users] must be a table of per-user tables")
    mine = users.setdefault(user, {}) if make else users.get(user, {})
    if not isinstance(mine, dict):
        raise UsageError(f"{path}: [users.{user}] must be a table")
    return mine


def _rewrite(path: Path, change: Callable[[dict[str, Any]], bool]) -> bool:
    """Read config.toml, apply ``change`` and replace the file, as one step.

    Writers take an exclusive ``flock`` on a lock file beside the config
    (``.config.toml.lock``, left in place: removing a lock file races with
    the next writer) and read the file only once they hold it, so a second
    writer sees the first one's change. The new text goes to a temporary file
    in the same folder, is fsynced and renamed over the old one, so a crash
    leaves the old file or the new one, never half of either; the file keeps
    its mode. A config.toml that is a symlink (a dotfiles checkout) is
    rewritten where it points. ``change`` returns False to write nothing;
    its answer is returned.
    """
    from agentbox.paths import private_dir

    private_dir(path.parent)
    target = Path(os.path.realpath(path))
    with _locked(target.with_name(f".{target.name}.lock")):
        doc = load(target)
        changed = change(doc)
        if changed:
            _replace(target, doc)
        return changed


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock``; another writer is waited for up to LOCK_WAIT."""
    import fcntl
    import time

    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise AgentboxError(f"{lock}: cannot lock the config: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Busy(f"{lock}: another `agentbox config` is still changing the "
                               f"config after {LOCK_WAIT:g}s; try again") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _replace(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to a temporary file beside ``path``, fsync it, rename it over ``path``."""
    import tempfile

    import tomli_w

    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o600
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                tomli_w.dump(doc, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
    except OSError as exc:  # a read-only or full disk: say so, leave the old file whole
        raise AgentboxError(f"{path}: cannot write config: {exc.strerror or exc}") from None


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
