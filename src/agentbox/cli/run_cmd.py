"""run: one short run of the agent (what a systemd timer or cron fires), or --watch:
a worker that runs until stopped, for one inbox or, with --all-users, for all of them."""


from typing import TYPE_CHECKING, Annotated, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import command_flag, duration_flag

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentbox.cli.session import Session
    from agentbox.ledger.store import Store
    from agentbox.upkeep import PruneReport
    from agentbox.worker import RunReport, Worker


HandlerArgv = Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
    metavar="[-- CMD ARGS...]", help="The handler command and its arguments, after --.",
    show_default=False)]
HandlerOption = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--handler", metavar="CMD",
    help="The handler command, split like a shell would (no shell runs it). "
    "Default: the `handler` setting.", show_default=False)]
NO_HANDLER = ("no handler: pass --handler CMD or -- CMD ARGS, or set one with "
              "`agentbox config set handler CMD`")


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
    watch: Annotated[bool, typer.Option(
        "--watch", help="Run until stopped: a run starts as soon as events are available "
        "or a timer falls due. A second watcher on the same inbox stands by and takes "
        "over when the first stops, dies or stalls. Exits 0 on SIGTERM or SIGINT.")] = False,
    all_users: Annotated[bool, typer.Option(
        "--all-users", help="With --watch: serve every user's inbox from this one process, "
        "one batch per inbox in turn; several such processes share the inboxes.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """One run: scheduler pass, lease, claim a batch, run the handler, finish, release.

    The handler reads {"user", "generation", "events": [...]} on stdin and
    answers {"messages", "approvals", "timers"} on stdout (empty = silence).
    Exit 0 done or nothing to do, 1 the handler failed or timed out (recorded;
    the events retry), 2 no handler, 75 the lease is held elsewhere or was lost,
    128 + the signal when SIGTERM or SIGINT stopped it (the events go back to
    pending, their attempt given back). With --watch, one line (or with --json
    one JSON object) per run that did something, and exit 0 after a stop.
    """
    from agentbox.errors import UsageError

    if all_users and not watch:
        raise UsageError("--all-users works with --watch")
    if watch and until_empty:
        raise UsageError("--until-empty and --watch do not go together: --watch keeps "
                         "running")
    argv = command_flag("--handler", handler, command)
    sess = session(ctx)
    flags = {"handler": argv, "handler_timeout": duration_flag("--timeout", timeout)}
    if all_users:
        _serve_all(sess, argv, flags, as_json)
        return
    settings = sess.settings(flags)
    if not settings.handler:
        raise UsageError(NO_HANDLER)
    from agentbox import channels, config, paths
    from agentbox.rules.breaker import budgeted
    from agentbox.worker import CommandHandler, Worker

    path = paths.config_path()
    known = channels.names(config.load(path), path, sess.user)
    worker = Worker(store=sess.store(), policy=settings.policy,
                    handler=CommandHandler(settings.handler, settings.policy.handler_timeout,
                                           channels=known),
                    user=sess.user, db=sess.db_target, clock=sess.now,
                    zone=sess.zone() if budgeted(settings.policy) else None)
    if watch:
        _watch(worker, as_json)
    else:
        _once(worker, until_empty, as_json)


def _once(worker: "Worker", until_empty: bool, as_json: bool) -> None:
    from agentbox import render
    from agentbox.worker import MAX_RUNS, run_until_empty

    with worker.stop.installed():
        reports = run_until_empty(worker) if until_empty else [worker.run_once()]
        pruned = _daily_prune(worker, reports)
    code = _exit_code(reports, worker.stop.signum)
    if as_json:
        render.document({"outcome": reports[-1].outcome if reports else "interrupted",
                         "exit_code": code, "runs": [r.document() for r in reports],
                         "prune": None if pruned is None else pruned.document()})
    else:
        for report in reports:
            render.line(report.describe())
        if pruned is not None and pruned.counts.total:
            render.line(pruned.describe())
    last = reports[-1] if reports else None
    if until_empty and code == 0 and last is not None and last.outcome not in ("idle",
                                                                                "paused"):
        render.notice(f"stopped after {MAX_RUNS} runs; more events may be waiting")
    if code != 0:
        render.error(last.error if last is not None and last.error else "interrupted")
    raise typer.Exit(code)


def _daily_prune(worker: "Worker", reports: "list[RunReport]") -> "PruneReport | None":
    """The run's share of pruning, at most once a day (see Worker.prune_if_due).

    Left to the other worker when the lease was busy; a prune that fails is a
    notice and does not fail the run.
    """
    from agentbox import render
    from agentbox.errors import AgentboxError

    if not reports or reports[-1].outcome == "busy":
        return None
    try:
        return worker.prune_if_due()
    except AgentboxError as exc:
        render.notice(f"prune skipped: {exc}")
        return None


def _exit_code(reports: "list[RunReport]", signalled: int | None) -> int:
    """The last run's code; a signal makes the command fail even after a clean finish."""
    code = reports[-1].exit_code if reports else 0
    if signalled is not None and code == 0:
        return 128 + signalled
    return code


def _say_run(report: "RunReport", as_json: bool, user: str | None = None) -> None:
    """One run of a watching worker: a line (or a JSON line); its trouble on stderr."""
    from agentbox import render

    prefix = f"{user}: " if user is not None else ""
    if as_json:
        render.json_line({"user": user, **report.document()} if user else report.document())
    else:
        render.line(prefix + report.describe())
    if report.outcome in ("failed", "lost", "refused") and report.error:
        render.notice(prefix + report.error)


def _watch(worker: "Worker", as_json: bool) -> None:
    from agentbox import render
    from agentbox.cli.listening import long_lived

    long_lived()
    with worker.stop.installed():
        worker.watch(lambda report: _say_run(report, as_json), render.notice)
    render.notice(f"stopped by {worker.stop.name}")


def _serve_all(sess: "Session", argv: list[str] | None, flags: "Mapping[str, object]",
               as_json: bool) -> None:
    """run --watch --all-users: one process serving every inbox."""
    import os

    from agentbox import config, paths, render
    from agentbox.errors import UsageError
    from agentbox.location import locate_inboxes, open_inboxes
    from agentbox.pool import Pool
    from agentbox.worker import CommandHandler, Worker, check_command

    if sess.user_flag is not None:
        raise UsageError("--all-users serves every user; leave out --user")
    target = locate_inboxes(sess.db_flag)
    if not config.resolve(paths.config_path(), "", flags).handler:
        raise UsageError(NO_HANDLER + " (a user's own setting overrides it for that user)")
    if argv:
        check_command(argv, os.environ)  # before watching: a typo fails now, not per inbox

    def worker_for(user: str, store: "Store") -> Worker:
        path = paths.config_path()
        settings = config.resolve(path, user, flags)
        if not settings.handler:
            raise UsageError(NO_HANDLER)
        from agentbox import channels

        handler = CommandHandler(settings.handler, settings.policy.handler_timeout,
                                 channels=channels.names(config.load(path), path, user))
        handler.check()
        from agentbox.calendar import local_zone
        from agentbox.rules.breaker import budgeted

        zone = local_zone(settings.timezone) if budgeted(settings.policy) else None
        return Worker(store=store, policy=settings.policy, handler=handler, user=user,
                      db=store.location, clock=sess.now, zone=zone)

    inboxes = open_inboxes(target)
    try:
        pool = Pool(inboxes, worker_for, sess.now,
                    emit=lambda user, report: _say_run(report, as_json, user),
                    say=render.notice)
        render.notice(f"serving every inbox in {inboxes.location}")
        from agentbox.cli.listening import long_lived

        long_lived()
        with pool.stop.installed():
            pool.serve()
        render.notice(f"stopped by {pool.stop.name}")
    finally:
        inboxes.close()
