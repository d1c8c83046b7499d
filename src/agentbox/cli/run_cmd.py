"""run: one short run of the agent, the unit a systemd timer or cron fires."""


from typing import TYPE_CHECKING, Annotated, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import command_flag, duration_flag

if TYPE_CHECKING:
    from agentbox.worker import RunReport


HandlerArgv = Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
    metavar="[-- CMD ARGS...]", help="The handler command and its arguments, after --.",
    show_default=False)]
HandlerOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--handler", metavar="CMD",
    help="The handler command, split like a shell would (no shell runs it). "
    "Default: the `handler` setting.", show_default=False)]


@app.command()
def run(
    ctx: typer.Context,
    command: HandlerArgv = None,
    handler: HandlerOption = None,
    timeout: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--timeout", metavar="DURATION",
        help="Stop the handler after this long (default: handler_timeout).",
        show_default=False)] = None,
    until_empty: Annotated[bool, typer.Option(
        "--until-empty", help="Repeat runs until nothing is left to claim (stops at the "
        "first run that does not exit 0).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """One run: scheduler pass, lease, claim a batch, run the handler, finish, release.

    The handler reads {"user", "generation", "events": [...]} on stdin and
    answers {"messages", "approvals", "timers"} on stdout (empty = silence).
    Exit 0 done or nothing to do, 1 the handler failed or timed out (recorded;
    the events retry), 2 no handler, 75 the lease is held elsewhere or was lost.
    """

    from agentbox import render
    from agentbox.errors import UsageError
    from agentbox.worker import MAX_RUNS, Worker, run_until_empty

    argv = command_flag("--handler", handler, command)
    sess = session(ctx)
    settings = sess.settings({"handler": argv,
                              "handler_timeout": duration_flag("--timeout", timeout)})
    if not settings.handler:
        raise UsageError("no handler: pass --handler CMD or -- CMD ARGS, or set one with "
                         "`agentbox config set handler CMD`")
    worker = Worker(store=sess.store(), policy=settings.policy, argv=settings.handler,
                    user=sess.user, db=sess.db_target, clock=sess.now)
    with worker.signals():
        reports = run_until_empty(worker) if until_empty else [worker.run_once()]
    code = _exit_code(reports, worker.signalled)
    if as_json:
        render.document({"outcome": reports[-1].outcome if reports else "interrupted",
                         "exit_code": code, "runs": [r.document() for r in reports]})
    else:
        for report in reports:
            render.line(report.describe())
    last = reports[-1] if reports else None
    if until_empty and code == 0 and last is not None and last.outcome != "idle":
        render.notice(f"stopped after {MAX_RUNS} runs; more events may be waiting")
    if code != 0:
        render.error(last.error if last is not None and last.error else "interrupted")
    raise typer.Exit(code)


def _exit_code(reports: "list[RunReport]", signalled: int | None) -> int:
    """The last run's code; a signal makes the command fail even after a clean finish."""
    code = reports[-1].exit_code if reports else 0
    if signalled is not None and code == 0:
        return 128 + signalled
    return code
