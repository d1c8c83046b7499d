"""The Typer application and its global options.

Command modules register themselves on :data:`app`. They import the store,
rich and anything else heavy inside their functions, never at module level:
``agentbox ingest`` runs once per webhook delivery and its start-up is part
of its speed.
"""


import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO, Annotated, Optional

import typer

from agentbox import __version__
from agentbox.cli.session import Session

# Every top-level command, in the order `agentbox --help` lists them (the daily
# path first), with the module that defines it. Only the module of the command
# being run is imported: start-up is paid once per webhook delivery.
COMMANDS: dict[str, str] = {
    "ingest": "ingest_cmd",
    "serve": "serve_cmd",
    "console": "console_cmd",
    "run": "run_cmd",
    "dispatch": "dispatch_cmds",
    "step": "step_cmd",
    "state": "durable_cmds",
    "steps": "durable_cmds",
    "status": "inbox_cmds",
    "resume": "inbox_cmds",
    "usage": "inbox_cmds",
    "events": "events_cmds",
    "dead": "inbox_cmds",
    "replay": "inbox_cmds",
    "schedule": "schedule_cmds",
    "approve": "approve_cmds",
    "outbox": "dispatch_cmds",
    "inboxes": "upkeep_cmds",
    "prune": "upkeep_cmds",
    "backup": "upkeep_cmds",
    "restore": "upkeep_cmds",
    "doctor": "upkeep_cmds",
    "metrics": "upkeep_cmds",
    "scenarios": "scenarios_cmd",
    "export": "rehearsal_cmds",
    "rehearse": "rehearsal_cmds",
    "config": "config_cmd",
    "systemd": "systemd_cmd",
}


class _OrderedGroup(typer.core.TyperGroup):
    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        rank = {name: n for n, name in enumerate(COMMANDS)}
        return sorted(super().list_commands(ctx),
                      key=lambda name: (rank.get(name, len(rank)), name))


app = typer.Typer(
    cls=_OrderedGroup,
    name="agentbox",
    help="Durable inbox, lease, timers, approvals and paced outbox for an always-on agent.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]


def _version(value: bool) -> None:
    if value:
        from agentbox import render

        render.line(f"agentbox {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    user: Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--user", "-u", help="Whose inbox (default: $AGENTBOX_USER, else the login name).",
        show_default=False)] = None,
    db: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--db", metavar="PATH|URL",
        help="Use this inbox file, or this postgresql:// database (default: $AGENTBOX_DB, "
        "else the `database` setting, else the user's own file).",
        show_default=False)] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Durable inbox, lease, timers, approvals and paced outbox for an always-on agent."""
    session = Session(user_flag=user, db_flag=db)
    if user is not None or os.environ.get("AGENTBOX_USER"):
        # A name someone gave is checked at once, even where --db makes it unneeded.
        session.user  # noqa: B018
    ctx.obj = session
    ctx.call_on_close(session.close)


@contextlib.contextmanager
def open_source(name: str) -> Iterator[IO[bytes]]:
    """A file opened for reading bytes, or stdin for '-' (``--payload-file``, ``--file``)."""
    from agentbox.errors import BadInput

    if name == "-":
        yield sys.stdin.buffer
        return
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise BadInput(f"cannot read {name}: {exc.strerror or exc}") from None
    with fh:
        yield fh


def session(ctx: typer.Context) -> Session:
    """The invocation's session, told which command asks (it decides what opening
    the inbox may do)."""
    found = ctx.find_root().obj
    assert isinstance(found, Session)
    found.command = " ".join(ctx.command_path.split()[1:])
    return found
