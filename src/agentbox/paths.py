"""Where agentbox keeps its files, and which user an inbox belongs to.

Everything lives under ``$AGENTBOX_HOME`` when it is set (data and config
alike), so a test or a second installation never touches the real user's
files; otherwise under the platform's user data and config directories.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentbox.errors import AgentboxError, BadInput

APP = "agentbox"
_USER_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


def home() -> Path | None:
    value = os.environ.get("AGENTBOX_HOME")
    return Path(value) if value else None


def data_dir() -> Path:
    root = home()
    if root is not None:
        return root
    import platformdirs  # only when needed: it is not free at start-up

    return platformdirs.user_data_path(APP)


def config_path() -> Path:
    root = home()
    if root is not None:
        return root / "config.toml"
    import platformdirs

    return platformdirs.user_config_path(APP) / "config.toml"


def check_user(name: str) -> str:
    """A user name is 1-64 ASCII letters, digits, '.', '_', '-', not starting with '.'."""
    if not _USER_NAME.fullmatch(name) or not name.isascii():
        shown = repr(name) if len(name) <= 80 else repr(name[:80]) + "…"
        raise BadInput(f"invalid user name {shown}: use 1-64 ASCII letters, digits, '.', "
                       "'_' or '-', not starting with '.'")
    return name


def resolve_user(flag: str | None) -> str:
    """``--user``, else ``AGENTBOX_USER`` (empty counts as unset), else the login name."""
    if flag is not None:
        return check_user(flag)
    env = os.environ.get("AGENTBOX_USER")
    if env:
        return check_user(env)
    import getpass

    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        raise BadInput("cannot tell the login name; pass --user NAME") from None
    try:
        return check_user(login)
    except BadInput as exc:
        raise BadInput(f"the login name cannot name an inbox ({exc}); pass --user NAME") from None


def inbox_path(user: str) -> Path:
    return data_dir() / "inboxes" / f"{check_user(user)}.sqlite3"


def private_dir(path: Path) -> Path:
    """Create a folder, and any missing parents, readable by this user only.

    A folder that cannot be made (no permission, a file in the way) is one
    clear line naming it, not an unexpected OSError.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise AgentboxError(f"cannot create folder {folder}: "
                                f"{exc.strerror or exc}") from None
    return path


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Replace ``path`` with ``data`` in one rename: a reader sees the old file or the
    new one, never half of it. The temporary file is made beside it, with ``mode``."""
    import secrets

    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(temp, mode)  # whatever the umask took away
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise AgentboxError(f"{path}: cannot write: {exc.strerror or exc}") from None
