"""step KEY -- CMD…: one journaled step inside a run (the work is agentbox.steprun's).

It runs once per step of a handler, so, like ingest, it imports nothing it
does not use: no rich, no rules of runs.
"""


from typing import Annotated, Optional

import typer

from agentbox.cli.app import app


@app.command()
def step(
    key: Annotated[str, typer.Argument(metavar="KEY", help="The step's key, unique in the "
                                       "inbox: build it from the events' idempotency keys.")],
    command: Annotated[list[str], typer.Argument(
        metavar="-- CMD ARGS...", help="The step's command (no shell runs it).",
        show_default=False)],
    mode: Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
        "--mode", metavar="at-least-once|at-most-once",
        help="What a try that died inside the step leads to: run it again, or park it "
        "uncertain (default: config `step_mode`).", show_default=False)] = None,
) -> None:
    """Run CMD as a journaled step of the current run: once done, never again.

    Inside a run only (the handler's environment names it). Exit 0 with the
    recorded stdout when KEY is done already (CMD does not run); 75 when the run
    no longer holds the lease (CMD does not run); 1 when KEY is uncertain;
    otherwise CMD's own exit code, its stdout passed through and, on exit 0,
    kept as the step's result. CMD sees AGENTBOX_STEP_KEY and AGENTBOX_STEP_ATTEMPT.
    """
    import sys

    from agentbox import clock, paths
    from agentbox.config import resolve
    from agentbox.errors import WorkFailed
    from agentbox.rules.steps import check_mode
    from agentbox.steprun import command_work, current_run, journaled, open_run_store

    run = current_run()
    policy = resolve(paths.config_path(), run.user).policy
    chosen = check_mode(mode) if mode is not None else policy.step_mode
    store = open_run_store(run)
    try:
        ran = journaled(store, run, key, chosen,
                        command_work(command, sys.stdout.buffer, policy.max_step_output),
                        clock.now)
    finally:
        store.close()
    if ran.action == "memo":
        sys.stdout.buffer.write(ran.output or b"")
        sys.stdout.buffer.flush()
        return
    from agentbox import render

    if not ran.kept:
        render.warning(f"step {key!r}: a newer try began meanwhile; this try's end was not "
                       "recorded")
    if ran.error is None:
        return
    if ran.exit_code in (0, 127):  # not started, or its stdout too large to keep
        raise WorkFailed(f"step {key!r} failed: {ran.error}")
    render.error(f"step {key!r} failed: {ran.error}; recorded, it runs again on the next try")
    raise typer.Exit(ran.exit_code)
