"""A real systemd user manager for one test, on a machine that was not booted with systemd.

As root, in a private mount namespace, it gives a throwaway user a home (a tmpfs on
/home), a passwd entry (a copy of /etc/passwd bound over it), a runtime folder and
a delegated cgroup, and starts ``systemd --user`` for that user. Only the test's own
namespace sees any of it; the cgroups it makes are removed when it ends. A script
then runs as that user, with ``systemctl --user`` talking to the manager, so the
units ``agentbox systemd`` writes run exactly as under a login.

:func:`why_not` says why it cannot run here (not root, no unshare, no systemd, a
Python the user could not reach), for the test to skip with.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

USER = "ablive"
CGROUP_ROOTS = ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified")
SYSTEMD = ("/lib/systemd/systemd", "/usr/lib/systemd/systemd")
ROOT = Path(__file__).resolve().parents[2]

DRIVER = r"""
set -eu
U={uid}; NAME={name}; CG=agentbox-live-$$
mount -t tmpfs tmpfs /run/systemd && mkdir -p /run/systemd/system
mkdir -p /run/user && mount -t tmpfs tmpfs /run/user
mkdir -m 700 /run/user/$U && chown $U:$U /run/user/$U
mount -t tmpfs -o mode=755 tmpfs /home && mkdir -m 755 /home/$NAME && chown $U:$U /home/$NAME
cp /etc/passwd "$STASH/passwd" && echo "$NAME:x:$U:$U::/home/$NAME:/bin/sh" >> "$STASH/passwd"
cp /etc/group "$STASH/group" && echo "$NAME:x:$U:" >> "$STASH/group"
mount --bind "$STASH/passwd" /etc/passwd && mount --bind "$STASH/group" /etc/group
{reveal}
cgroups=""
for h in {cgroup_roots}; do
  [ -w "$h" ] || continue
  mkdir "$h/$CG" && chown -R $U:$U "$h/$CG" && echo $$ > "$h/$CG/cgroup.procs"
  cgroups="$cgroups $h"
done
as_user() {{ setpriv --reuid $U --regid $U --clear-groups --inh-caps=-all env -i \
  HOME=/home/$NAME USER=$NAME LOGNAME=$NAME XDG_RUNTIME_DIR=/run/user/$U \
  PATH="$PATHS" LANG=C.UTF-8 "$@"; }}
as_user {systemd} --user >"$STASH/manager.log" 2>&1 &
manager=$!
cleanup() {{
  as_user systemctl --user exit >/dev/null 2>&1 || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 $manager 2>/dev/null || break; sleep 0.5; done
  kill -KILL $manager 2>/dev/null || true
  wait $manager 2>/dev/null || true
  for h in $cgroups; do
    echo $$ > "$h/cgroup.procs"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find "$h/$CG" -depth -type d -exec rmdir {{}} + 2>/dev/null && break; sleep 0.5
    done
  done
}}
trap cleanup EXIT
for _ in $(seq 50); do [ -S /run/user/$U/systemd/private ] && break; sleep 0.2; done
as_user "$@"
"""


def _free_uid() -> int:
    uid = 42420
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def _needed() -> list[Path]:
    """What the user must reach: the interpreter, the virtualenv, the checkout."""
    return [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), ROOT]


def _blocked(path: Path) -> Path | None:
    """The highest folder on the way to ``path`` that others cannot pass through."""
    for folder in [*reversed(path.parents), path]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def _reveal() -> tuple[str, str | None]:
    """Shell lines that make each needed path reachable inside the namespace, by laying
    a passable tmpfs over the one closed folder above it and binding the path back;
    or why that cannot be done."""
    lines: list[str] = []
    done: set[Path] = set()
    for n, path in enumerate(_needed()):
        closed = _blocked(path)
        if closed is None or path in done:
            continue
        inner = path.relative_to(closed)
        keep = closed / inner.parts[0] if inner.parts else None
        if keep is None or _blocked(keep) not in (None, closed) or closed in done:
            return "", f"{path} is not reachable by other users"
        lines += [f'mkdir -p "$STASH/keep{n}" && mount --bind "{keep}" "$STASH/keep{n}"',
                  f'mount -t tmpfs -o mode=755 tmpfs "{closed}"',
                  f'mkdir -p "{keep}" && mount --move "$STASH/keep{n}" "{keep}"']
        done |= {closed, path}
    return "\n".join(lines), None


def why_not() -> str | None:
    """Why a user manager cannot be started here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root, to give a throwaway user a private home and cgroup"
    missing = [tool for tool in ("unshare", "setpriv", "systemctl") if not shutil.which(tool)]
    if missing or not any(Path(p).exists() for p in SYSTEMD):
        return f"needs {', '.join(missing) or 'the systemd binary'}"
    if not any(os.access(p, os.W_OK) for p in CGROUP_ROOTS):
        return "needs a writable systemd cgroup hierarchy to delegate"
    if any(p == Path("/home") or Path("/home") in p.parents for p in _needed()):
        return "the checkout or Python lives under /home, which the test hides"
    return _reveal()[1]


def run_as_user(script: Path, stash: Path, timeout: float,
                env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (bash) as the throwaway user under a fresh user manager, with
    ``env`` added to the user's otherwise clean environment."""
    reveal, why = _reveal()
    assert why is None, why
    systemd = next(p for p in SYSTEMD if Path(p).exists())
    driver = stash / "driver.sh"
    driver.write_text(DRIVER.format(uid=_free_uid(), name=USER, reveal=reveal,
                                    cgroup_roots=" ".join(CGROUP_ROOTS), systemd=systemd))
    paths = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin",
                             "/bin"])
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash",
                           str(driver), "env", *(f"{k}={v}" for k, v in env.items()),
                           "bash", str(script)],
                          env={**os.environ, "STASH": str(stash), "PATHS": paths},
                          capture_output=True, text=True, timeout=timeout)
