"""systemd: a service and timer pair that runs `agentbox run` on a schedule."""


from pathlib import Path
from typing import Annotated, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import command_flag, duration_flag
from agentbox.cli.run_cmd import HandlerArgv, HandlerOption

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                   "@%+=:,./-_$")


def systemd_quote(word: str) -> str:
    """One argument as systemd's ExecStart= parses it: specifiers and variables escaped,
    quoted when it holds anything but plain characters."""
    escaped = word.replace("%", "%%").replace("$", "$$")
    if escaped and set(escaped) <= _PLAIN:
        return escaped
    inner = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{inner}"'


def _agentbox_argv() -> list[str]:
    """How to start this very agentbox: its console script, else the interpreter."""
    import os
    import sys

    script = Path(sys.argv[0])
    if script.name == "agentbox" and script.is_file() and os.access(script, os.X_OK):
        return [str(script.resolve())]
    return [sys.executable, "-m", "agentbox"]


def _absolute_program(argv: list[str]) -> list[str]:
    """The handler's program as an absolute path: a unit has neither our cwd nor PATH."""
    import os
    import shutil

    program = argv[0]
    found = os.path.abspath(program) if os.sep in program else shutil.which(program)
    return [found or program, *argv[1:]]


def units(user: str, exec_argv: list[str], every: int, home: str | None,
          workdir: str) -> dict[str, str]:
    """The text of ``agentbox-USER.service`` and ``agentbox-USER.timer``."""
    from agentbox.durations import format_duration

    name = f"agentbox-{user}"
    spelled = format_duration(every)
    service = [
        "[Unit]",
        f"Description=agentbox run for {user}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=oneshot",
        "WorkingDirectory=" + systemd_quote(workdir),
        "ExecStart=" + " ".join(systemd_quote(w) for w in exec_argv),
        # 75: the lease was held by another worker or was lost; the next tick retries.
        "SuccessExitStatus=75",
    ]
    if home is not None:
        service.append("Environment=" + systemd_quote(f"AGENTBOX_HOME={home}"))
    timer = [
        "[Unit]",
        f"Description=Run agentbox for {user} every {spelled}",
        "",
        "[Timer]",
        f"OnBootSec={spelled}",
        f"OnUnitActiveSec={spelled}",
        "AccuracySec=1s",
        "Persistent=true",
        f"Unit={name}.service",
        "",
        "[Install]",
        "WantedBy=timers.target",
    ]
    return {f"{name}.service": "\n".join(service) + "\n",
            f"{name}.timer": "\n".join(timer) + "\n"}


@app.command()
def systemd(
    ctx: typer.Context,
    command: HandlerArgv = None,
    every: Annotated[str, typer.Option(
        "--every", metavar="DURATION", help="How often the timer fires `agentbox run`.")] = "1m",
    handler: HandlerOption = None,
    directory: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--dir", metavar="DIR", help="Write the two unit files into DIR instead of printing them "
        "(e.g. ~/.config/systemd/user).", file_okay=False, show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Print a oneshot .service running `agentbox run --until-empty` and a .timer firing it."""
    from agentbox import render

    interval = duration_flag("--every", every)
    assert interval is not None
    argv = command_flag("--handler", handler, command)
    sess = session(ctx)
    settings = sess.settings({"handler": argv})
    if not settings.handler:
        render.notice("no handler is configured yet: the service will fail until you set "
                      "one with `agentbox config set handler CMD`")
    exec_argv = [*_agentbox_argv(), "--user", sess.user]
    if sess.db_flag is not None:
        exec_argv += ["--db", sess.db_target]
    exec_argv += ["run", "--until-empty"]
    if argv:
        exec_argv += ["--", *_absolute_program(argv)]
    import os

    from agentbox import paths

    home = paths.home()
    texts = units(sess.user, exec_argv, interval, None if home is None else str(home.resolve()),
                  os.getcwd())
    if directory is not None:
        _write(directory, texts)
    if as_json:
        render.document([{"name": name, "text": text,
                          "path": None if directory is None else str(directory / name)}
                         for name, text in texts.items()])
    elif directory is not None:
        for name in texts:
            render.line(str(directory / name))
    else:
        for name, text in texts.items():
            render.line(f"# {name}")
            render.line(text)


def _write(directory: Path, texts: dict[str, str]) -> None:
    from agentbox import paths
    from agentbox.errors import AgentboxError

    paths.private_dir(directory)
    for name, text in texts.items():
        try:
            (directory / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise AgentboxError(f"cannot write {directory / name}: "
                                f"{exc.strerror or exc}") from None
