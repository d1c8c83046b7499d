"""Reading scenario files: the shipped ones by number or name, or a user's own."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from agentbox.errors import BadInput, UsageError
from agentbox.replay.fields import Check, StepError, moment, text, when
from agentbox.replay.kinds import KINDS
from agentbox.replay.model import Scenario, Step
from agentbox.rules.policy import Policy

DEFAULT_START = 1_000_000  # the article's simulated clock starts here
PACKAGE = "agentbox.scenarios"
_TOP_KEYS = ("title", "story", "description", "start", "settings", "step")
_COMMON = ("do", "expect", "at", "label")


def _step(raw: Any, n: int, start: int) -> Step:
    if not isinstance(raw, dict):
        raise StepError("must be a table ([[step]])")
    kind_name = raw.get("do")
    if kind_name is None:
        raise StepError("missing field 'do' (the step kind)")
    if kind_name not in KINDS:
        raise StepError(f"unknown step kind {kind_name!r} (known: {', '.join(KINDS)})")
    kind = KINDS[kind_name]
    known = {*_COMMON, *kind.required, *kind.optional}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise StepError(f"unknown field {unknown[0]!r} (this kind takes "
                        f"{', '.join(sorted(known - {'do'}))})")
    args: dict[str, Any] = {}
    for name, check in kind.required.items():
        if name not in raw:
            raise StepError(f"missing field {name!r}")
        args[name] = _field(name, check, raw[name], start)
    for name, (check, default) in kind.optional.items():
        args[name] = _field(name, check, raw[name], start) if name in raw else default
    if kind.check is not None:
        kind.check(args)
    if kind.expect is None:
        if "expect" in raw:
            raise StepError("a clock step takes no 'expect'")
    elif "expect" not in raw:
        raise StepError(f"missing field 'expect' ({kind.expect.says})")
    elif not (kind.expect.accepts(raw["expect"]) or raw["expect"] == "error"):
        raise StepError(f"field 'expect' must be {kind.expect.says}, not {raw['expect']!r}")
    at = _field("at", when, raw["at"], start) if "at" in raw else None
    label = _field("label", text, raw["label"], start) if "label" in raw else kind.label(args)
    return Step(n, kind_name, args, raw.get("expect"), at, label)


def _field(name: str, check: Check, value: Any, start: int) -> Any:
    try:
        return check(value, start)
    except StepError as exc:
        raise StepError(f"field {name!r} {exc}") from None


def _policy(settings: Any, origin: str) -> Policy:
    from agentbox.config import KEYS, parse_settings

    if not isinstance(settings, dict):
        raise BadInput(f"{origin}: [settings] must be a table")
    allowed = [name for name in Policy._fields if name in KEYS]
    return Policy(**parse_settings(settings, f"{origin}: settings", allowed))


def _prose(doc: Mapping[str, Any], key: str, origin: str) -> str:
    """Free text, optional; a TOML multi-line string loses its surrounding newlines."""
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise BadInput(f"{origin}: {key!r} must be a string")
    return value.strip()


def parse(text: str, origin: str, name: str) -> Scenario:
    """A scenario from TOML text; any problem is one BadInput line naming the file."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{origin}: invalid TOML: {exc}") from None
    unknown = sorted(set(doc) - set(_TOP_KEYS))
    if unknown:
        raise BadInput(f"{origin}: unknown key {unknown[0]!r} "
                       f"(a scenario has {', '.join(_TOP_KEYS)})")
    title = doc.get("title")
    if not isinstance(title, str) or not title:
        raise BadInput(f"{origin}: missing 'title' (a non-empty string)")
    story, description = (_prose(doc, key, origin) for key in ("story", "description"))
    start = moment(doc.get("start", DEFAULT_START))
    if start is None:
        raise BadInput(f"{origin}: 'start' must be Unix seconds (a whole number) within the "
                       "years 1970 to 9999, or a date-time with an offset")
    settings = doc.get("settings", {})
    policy = _policy(settings, origin)
    raw_steps = doc.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise BadInput(f"{origin}: no steps (write each one as a [[step]] table)")
    steps = []
    for n, raw in enumerate(raw_steps, 1):
        kind = raw.get("do") if isinstance(raw, dict) else None
        where = f"step {n} ({kind})" if isinstance(kind, str) and kind in KINDS else f"step {n}"
        try:
            steps.append(_step(raw, n, start))
        except StepError as exc:
            raise BadInput(f"{origin}: {where}: {exc}") from None
    return Scenario(name, origin, title, story, description, start, settings, policy,
                    tuple(steps))


def shipped() -> list[tuple[str, Traversable]]:
    """The scenario files that ship with agentbox, in order."""
    folder = resources.files(PACKAGE)
    found = [(f.name.removesuffix(".toml"), f) for f in folder.iterdir()
             if f.name.endswith(".toml")]
    return sorted(found, key=lambda item: item[0])


def _matches(token: str, name: str) -> bool:
    number, _, words = name.partition("-")
    if token.isdigit() and number.isdigit():
        return int(token) == int(number)
    return token in (name, words, f"{name}.toml")


def _read(source: Traversable | Path, origin: str) -> str:
    try:
        return source.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{origin}: not UTF-8 text") from None
    except OSError as exc:
        raise BadInput(f"{origin}: cannot read: {exc.strerror or exc}") from None


def load(token: str) -> Scenario:
    """A shipped scenario by number or name (`4`, `04`, `lease-takeover`), else a file."""
    looks_like_path = "/" in token or token.endswith(".toml")
    if not looks_like_path or not Path(token).exists():
        for name, source in shipped():
            if _matches(token, name):
                return parse(_read(source, source.name), source.name, name)
    path = Path(token)
    if not path.exists():
        raise UsageError(f"no scenario named {token!r} and no such file "
                         "('agentbox scenarios --list' names the shipped ones)")
    if path.is_dir():
        raise BadInput(f"{token}: is a directory, not a scenario file")
    return parse(_read(path, token), token, path.stem)


def load_all(tokens: Sequence[str]) -> list[Scenario]:
    if tokens:
        return [load(token) for token in tokens]
    return [parse(_read(source, source.name), source.name, name) for name, source in shipped()]

