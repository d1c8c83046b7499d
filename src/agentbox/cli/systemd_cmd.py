"""systemd: user units that keep one user's agent running.

Two ways to run `agentbox run` and `agentbox dispatch`: a oneshot service per
command fired by a timer (the default), or, with ``--watch``, long-running
services that restart on failure. ``--serve`` adds a service for the webhook
receiver. Every unit is meant for the per-user manager (``systemctl --user``),
so none names a system-only target such as network-online.target.

Stopping: ``KillMode=mixed`` sends SIGTERM to agentbox alone, which stops its
handler's or sender's process group itself, gives the claimed events back and
exits; whatever is left in the unit's cgroup after that (a process that left
the group on purpose) gets SIGKILL. ``TimeoutStopSec`` leaves room for that.

Hardening: every service takes the sandboxing a user service running
agentbox and an arbitrary handler can bear (:data:`HARDENING`, each setting's
reason in docs/operations-systemd.md): the file system read-only but for the
inbox's folder and the working directory, a private /tmp where nothing agentbox
needs lies under /tmp, no new privileges, files private by default, and only
local and Internet sockets. A drop-in loosens or tightens it per unit.

Missed ticks: ``Persistent=`` only acts on ``OnCalendar=`` timers, which
cannot say "every 90s", so the timers are monotonic: ``OnBootSec=`` elapses
at once when it is already past as the timer starts (after boot, at login,
at ``enable --now``), and each run drains everything due, agentbox's own
timers catching up by their own rule. One run after downtime stands for all
the ticks that were missed.
"""


import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import command_flag, duration_flag
from agentbox.cli.run_cmd import HandlerArgv, HandlerOption

DEFAULT_EVERY = "1m"
DEFAULT_LISTEN = "127.0.0.1:8787"
# agentbox needs up to process.STOP_GRACE (5 s) to stop its child, then a few
# transactions to give the events back; systemd SIGKILLs what is left after this.
STOP_TIMEOUT = "30s"
RESTART_DELAY = "5s"
# 75: the lease is held elsewhere or the database stayed busy; the next tick retries.
# 143: stopped by SIGTERM (systemctl stop) after a clean stop, which is no failure.
ONESHOT_SUCCESS = "75 143"

# The sandboxing every service takes, in the order docs/operations-systemd.md explains
# it. None of these can keep a service from starting: where the user manager cannot
# make a user namespace, systemd skips the mount-based ones.
HARDENING = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ProtectKernelTunables=yes",
    "ProtectControlGroups=yes",
    "ProtectHostname=yes",
    "NoNewPrivileges=yes",
    "RestrictSUIDSGID=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "SystemCallArchitectures=native",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "UMask=0077",
)
# Where this host lets the user manager make a user namespace: PrivateUsers= makes the
# mount-based settings take effect on systemd 252 too (253 and later imply it), and
# these fail a service that cannot have one, so they come only with it.
IN_USER_NAMESPACE = (
    "PrivateUsers=yes",
    "CapabilityBoundingSet=",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectClock=yes",
)
# Where each of the kernel's switches says unprivileged user namespaces are off.
USERNS_OFF = {"/proc/sys/user/max_user_namespaces": "0",
              "/proc/sys/kernel/unprivileged_userns_clone": "0",
              "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}
_TEMPORARY = ("/tmp", "/var/tmp")  # hidden from a service by PrivateTmp=

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                   "@%+=:,./-_$")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _c_escaped(text: str) -> str:
    """``text`` inside double quotes: backslash, quote and control characters escaped."""
    return "".join(_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7f
                                       else c) for c in text)


def systemd_quote(word: str, program: bool = False) -> str:
    """One word as systemd's ExecStart= parses it: specifiers and variables escaped,
    quoted when it holds anything but plain characters.

    The ``program`` (the first word) is never searched for variables, so its
    ``$`` stays single there.
    """
    escaped = word.replace("%", "%%")
    if not program:
        escaped = escaped.replace("$", "$$")
    if escaped and set(escaped) <= _PLAIN:
        return escaped
    return f'"{_c_escaped(escaped)}"'


def exec_line(argv: list[str]) -> str:
    """The value of ExecStart= that runs exactly ``argv``."""
    return " ".join(systemd_quote(word, program=n == 0) for n, word in enumerate(argv))


def environment_item(name: str, value: str) -> str:
    """One ``Environment=`` assignment: quoted, specifiers escaped (``$`` is literal there)."""
    return f'"{_c_escaped(f"{name}={value}".replace("%", "%%"))}"'


def path_item(path: str) -> str:
    """One path of ReadWritePaths=: specifiers escaped, quoted when not plain (``$`` is
    literal there)."""
    escaped = path.replace("%", "%%")
    return escaped if set(escaped) <= _PLAIN - {"$"} else f'"{_c_escaped(escaped)}"'


def systemd_path(path: str, flag: str) -> str:
    """A path for WorkingDirectory= or EnvironmentFile=, which take it raw, unquoted.

    Only specifiers are escaped. What such a setting cannot carry (control
    characters, whitespace at either end, a trailing backslash, which would
    join the next line) is refused with a usage error naming ``flag``.
    """
    from agentbox.errors import UsageError

    if (path != path.strip() or path.endswith("\\")
            or any(ord(c) < 0x20 or ord(c) == 0x7f for c in path)):
        raise UsageError(f"{flag}: systemd cannot name the path {path!r} in a unit file "
                         "(control characters, surrounding spaces or a trailing backslash)")
    return path.replace("%", "%%")


@dataclass(frozen=True)
class Plan:
    """Everything the units depend on, gathered by the command."""

    user: str
    agentbox: list[str]  # how to start agentbox, with --user (and --db)
    workdir: str
    home: str | None = None  # AGENTBOX_HOME, carried when set
    env_file: str | None = None
    every: int | None = None  # None: long-running --watch services
    handler: list[str] | None = None  # None: the `handler` setting, read at each run
    sender: list[str] | None = None  # None: the `sender` setting, read at each dispatch
    listen: str | None = None  # a serve unit on this address
    writable: tuple[str, ...] = ()  # the only folders a service may write (and below)
    private_tmp: bool = False  # nothing the services need lies under /tmp or /var/tmp
    userns: bool = False  # this host lets the user manager make user namespaces

    def name(self, command: str) -> str:
        return f"agentbox-{self.user}-{command}"

    def enable(self) -> list[str]:
        """The units to enable: the timers, or the long-running services."""
        kind = "service" if self.every is None else "timer"
        names = [f"{self.name(c)}.{kind}" for c in ("run", "dispatch")]
        return names + ([f"{self.name('serve')}.service"] if self.listen else [])


def units(plan: Plan) -> dict[str, str]:
    """The text of every unit file, by file name."""
    from agentbox.durations import format_duration

    watch = ["--watch"] if plan.every is None else []
    commands = {
        "run": ["run", *(watch or ["--until-empty"]),
                *(["--", *plan.handler] if plan.handler else [])],
        "dispatch": ["dispatch", *watch, *(["--", *plan.sender] if plan.sender else [])],
    }
    if plan.listen:
        commands["serve"] = ["serve", "--listen", plan.listen]
    texts: dict[str, str] = {}
    for command, args in commands.items():
        name = plan.name(command)
        if command == "serve":
            texts[f"{name}.service"] = _service(
                plan, f"agentbox serve on {plan.listen} for {plan.user}",
                [*plan.agentbox, *args], timed=False)
        elif plan.every is None:
            texts[f"{name}.service"] = _service(
                plan, f"agentbox {command} --watch for {plan.user}", [*plan.agentbox, *args],
                timed=False)
        else:
            every = format_duration(plan.every)
            texts[f"{name}.service"] = _service(
                plan, f"agentbox {command} for {plan.user}", [*plan.agentbox, *args],
                timed=True)
            texts[f"{name}.timer"] = _timer(
                name, f"Start agentbox {command} for {plan.user} every {every}", every)
    return texts


def _service(plan: Plan, description: str, argv: list[str], timed: bool) -> str:
    lines = ["[Unit]", f"Description={description}", "", "[Service]",
             "Type=oneshot" if timed else "Type=exec",
             "WorkingDirectory=" + systemd_path(plan.workdir, "the current folder")]
    if plan.home is not None:
        lines.append("Environment=" + environment_item("AGENTBOX_HOME", plan.home))
    if plan.env_file is not None:
        lines.append("EnvironmentFile=" + systemd_path(plan.env_file, "--env-file"))
    lines += ["ExecStart=" + exec_line(argv),
              "KillMode=mixed", f"TimeoutStopSec={STOP_TIMEOUT}",
              *(IN_USER_NAMESPACE if plan.userns else ()), *HARDENING,
              *(["PrivateTmp=yes"] if plan.private_tmp else []),
              *(f"ReadWritePaths={path_item(path)}" for path in plan.writable)]
    if timed:
        lines.append(f"SuccessExitStatus={ONESHOT_SUCCESS}")
    else:
        lines += ["Restart=on-failure", f"RestartSec={RESTART_DELAY}",
                  "", "[Install]", "WantedBy=default.target"]
    return "\n".join(lines) + "\n"


def _timer(name: str, description: str, every: str) -> str:
    return "\n".join([
        "[Unit]", f"Description={description}", "",
        "[Timer]",
        f"OnBootSec={every}",  # already past when the timer starts: elapses at once
        f"OnUnitActiveSec={every}",
        "AccuracySec=1s",
        f"Unit={name}.service", "",
        "[Install]", "WantedBy=timers.target",
    ]) + "\n"


def userns_switch_off() -> str | None:
    """The kernel switch that turns unprivileged user namespaces off here, or None."""
    for switch, off in USERNS_OFF.items():
        try:
            with open(switch, encoding="ascii") as fh:
                if fh.read().strip() == off:
                    return switch
        except (OSError, ValueError):  # no such switch on this kernel
            continue
    return None


def _under_tmp(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == t or real.startswith(t + "/") for t in _TEMPORARY)


def _inbox_folder(target: str, own: bool) -> str | None:
    """The folder the inbox's files live in (None for PostgreSQL), made if it is the
    user's own: the services may write there and nowhere else of agentbox's, so it must
    exist before they start."""
    from agentbox import paths
    from agentbox.location import is_url

    if is_url(target):
        return None
    folder = Path(target).parent
    if own:
        paths.private_dir(folder)
    return str(folder.resolve())


def _agentbox_argv() -> list[str]:
    """How to start this very agentbox: its console script, else the interpreter."""
    import sys

    script = Path(sys.argv[0])
    if script.name == "agentbox" and script.is_file() and os.access(script, os.X_OK):
        return [str(script.resolve())]
    return [sys.executable, "-m", "agentbox"]


def _absolute_program(argv: list[str] | None) -> list[str] | None:
    """The command's program as an absolute path: a unit has neither our cwd nor PATH."""
    import shutil

    if not argv:
        return None
    program = argv[0]
    found = os.path.abspath(program) if os.sep in program else shutil.which(program)
    return [found or program, *argv[1:]]


def _listen_flag(value: str) -> str:
    """HOST:PORT (an IPv6 host in brackets); a bad spelling is a usage error."""
    from agentbox.errors import UsageError

    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(
            c.isspace() for c in value):
        raise UsageError(f"--listen: expected HOST:PORT, e.g. {DEFAULT_LISTEN}, not {value!r}")
    return value


def _env_file_flag(path: Path) -> str:
    """The env file's absolute path; a notice when others may read or change it."""
    from agentbox import render
    from agentbox.errors import UsageError

    if any(c in str(path) for c in "*?["):
        raise UsageError(f"--env-file: systemd would read {str(path)!r} as a wildcard; "
                         "use a path without *, ? or [")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        render.notice(f"{path} can be read or changed by other users (mode {mode:03o}); "
                      f"keep secrets private with `chmod 600 {path}`")
    return str(path)


def user_unit_dir() -> Path:
    """Where the per-user manager looks for units: $XDG_CONFIG_HOME/systemd/user."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config) if os.path.isabs(config) else Path.home() / ".config"
    return base / "systemd" / "user"


EveryOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--every", metavar="DURATION", help=f"How often the timers fire (default {DEFAULT_EVERY}); "
    "not with --watch.", show_default=False)]
ViaOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--via", metavar="CMD", help="The sender for `agentbox dispatch`, split like a shell "
    "would. Default: the `sender` setting, read at each dispatch.", show_default=False)]


@app.command()
def systemd(
    ctx: typer.Context,
    command: HandlerArgv = None,
    handler: HandlerOption = None,
    via: ViaOption = None,
    every: EveryOption = None,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Long-running `run --watch` and `dispatch --watch` services "
        "(Restart=on-failure) instead of timers.")] = False,
    serve: Annotated[bool, typer.Option(
        "--serve", help="Also a service for `agentbox serve`, the webhook receiver.")] = False,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT", help="The address `agentbox serve` listens on "
        "(with --serve).")] = DEFAULT_LISTEN,
    env_file: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--env-file", metavar="FILE", help="Environment variables for every unit "
        "(API keys, secrets): EnvironmentFile=. Keep it chmod 600.", exists=True,
        dir_okay=False, resolve_path=True, show_default=False)] = None,
    install: Annotated[bool, typer.Option(
        "--install", help="Write the units into the user unit folder "
        "($XDG_CONFIG_HOME/systemd/user) and print the systemctl lines that start them.")
    ] = False,
    directory: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--dir", metavar="DIR", help="Write the unit files into DIR instead of printing them.",
        file_okay=False, show_default=False)] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace unit files that exist with other contents.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Print (or install) systemd user units for `agentbox run` and `agentbox dispatch`.

    By default each runs as a oneshot service fired by a timer; with --watch
    as a long-running service. With --install or --dir, a unit file that
    exists with other contents is refused (exit 3) unless --force; one that
    is already the same is left alone.
    """
    from agentbox import paths, render
    from agentbox.errors import UsageError

    if install and directory is not None:
        raise UsageError("give --install or --dir, not both")
    if watch and every is not None:
        raise UsageError("--every sets the timers; --watch services run all the time")
    interval = None if watch else duration_flag("--every", every or DEFAULT_EVERY)
    handler_argv = command_flag("--handler", handler, command)
    sender_argv = command_flag("--via", via, None)
    sess = session(ctx)
    settings = sess.settings({"handler": handler_argv})
    if not settings.handler:
        render.notice("no handler is configured yet: the run service will fail until you set "
                      "one with `agentbox config set handler CMD`")
    if not (sender_argv or settings.sender):
        render.notice("no sender is configured yet: until you set one with `agentbox config "
                      "set sender CMD` (or pass --via), the dispatch service writes each "
                      "message to the journal and counts it as sent")
    _say_channels(sess.user, sender_argv is not None)
    exec_argv = [*_agentbox_argv(), "--user", sess.user]
    if sess.db_flag is not None:
        exec_argv += ["--db", sess.db_target]
    home = paths.home()
    workdir = os.getcwd()
    inbox = _inbox_folder(sess.db_target, own=sess.chosen_db is None)
    writable = tuple(dict.fromkeys(p for p in (inbox, workdir) if p is not None))
    plan = Plan(user=sess.user, agentbox=exec_argv, workdir=workdir,
                home=None if home is None else str(home.resolve()),
                env_file=None if env_file is None else _env_file_flag(env_file),
                every=interval, handler=_absolute_program(handler_argv),
                sender=_absolute_program(sender_argv),
                listen=_listen_flag(listen) if serve else None, writable=writable)
    needed = [*writable, str(paths.config_path()), *exec_argv[:1],
              *(word for argv in (plan.handler, plan.sender) if argv for word in argv
                if os.path.isabs(word)),
              *([plan.env_file] if plan.env_file else [])]
    off = userns_switch_off()
    if off is not None:
        render.notice(f"{off} turns unprivileged user namespaces off on this host: the units "
                      "leave out PrivateUsers= and what needs it, and systemd skips "
                      "ProtectSystem=, ProtectHome=, PrivateTmp= and ReadWritePaths=")
    plan = replace(plan, private_tmp=not any(_under_tmp(p) for p in needed), userns=off is None)
    texts = units(plan)
    target = user_unit_dir() if install else directory
    written = {} if target is None else _write(target, texts, force)
    commands = ["systemctl --user daemon-reload",
                "systemctl --user enable --now " + " ".join(plan.enable())]
    if as_json:
        render.document({"units": [
            {"name": name, "text": text,
             "path": None if target is None else str(target / name),
             "written": written.get(name)} for name, text in texts.items()],
            "commands": commands})
    elif target is None:
        for name, text in texts.items():
            render.line(f"# {name}")
            render.data(text)
    else:
        for name, status in written.items():
            render.notice(f"{status} {target / name}")
        for line in commands if install else [str(target / name) for name in texts]:
            render.data(line)


def _write(directory: Path, texts: dict[str, str], force: bool) -> dict[str, str]:
    """Write the units (all, or none when one would replace other contents without
    ``force``); per file, "wrote", "replaced" or "unchanged"."""
    from agentbox import paths
    from agentbox.errors import AgentboxError, NotAsAsked

    status: dict[str, str] = {}
    for name, text in texts.items():
        path = directory / name
        try:
            old = path.read_text(encoding="utf-8") if path.exists() else None
        except (OSError, UnicodeDecodeError):
            old = ""
        status[name] = "wrote" if old is None else "unchanged" if old == text else "replaced"
    clashes = [str(directory / n) for n, s in status.items() if s == "replaced"]
    if clashes and not force:
        raise NotAsAsked(f"{len(clashes)} unit file(s) exist with other contents "
                         f"({', '.join(clashes)}); nothing was written; pass --force to "
                         "replace them")
    paths.private_dir(directory)
    for name, text in texts.items():
        if status[name] == "unchanged":
            continue
        path = directory / name
        try:
            temporary = path.with_name(f".{name}.tmp")
            temporary.write_text(text, encoding="utf-8")
            temporary.replace(path)
        except OSError as exc:
            raise AgentboxError(f"cannot write {path}: {exc.strerror or exc}") from None
    return status


def _say_channels(user: str, via: bool) -> None:
    """The dispatch service serves every channel config.toml has, each by its own sender
    unless --via names one for all of them: say which, when there is more than one."""
    from agentbox import channels, config, paths, render

    path = paths.config_path()
    names = sorted(channels.names(config.load(path), path, user))
    if len(names) < 2:
        return
    render.notice(f"the dispatch service serves every channel: {', '.join(names)}"
                  + ("; --via sends all of them through one sender" if via else ""))
