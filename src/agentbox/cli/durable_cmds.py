"""state and steps: the agent's state and the journal of steps, for an operator.

The step itself (``agentbox step KEY -- CMD``) is in step_cmd, which a handler
starts once per step and which loads none of this.
"""


from typing import Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, open_source, session
from agentbox.errors import Exit

state_app = typer.Typer(help="The agent's state: one JSON object, versioned, written by "
                        "each run's finish.", no_args_is_help=False,
                        invoke_without_command=True)
app.add_typer(state_app, name="state")
steps_app = typer.Typer(help="The journal of steps: what each KEY did, and settling the "
                        "uncertain ones.", no_args_is_help=False, invoke_without_command=True)
app.add_typer(steps_app, name="steps")

STEP_COLUMNS = ["key", "status", "attempts", "generation", "started_at", "finished_at",
                "exit_code", "output_bytes", "error"]


def _show_state(ctx: typer.Context, as_json: bool) -> None:
    from agentbox import render

    version = session(ctx).store().state()
    if as_json:
        render.document(version.document())
        return
    import json

    said = ("never written" if version.updated_at is None else
            f"written {render.when(version.updated_at)} by {version.author}"
            f"{'' if version.generation is None else f' (generation {version.generation})'}")
    render.notice(f"state version {version.version}, {said}")
    render.data(json.dumps(version.value(), indent=2, ensure_ascii=False, sort_keys=True))


@state_app.callback()
def state(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Print the agent's state (same as `state show`)."""
    if ctx.invoked_subcommand is None:
        _show_state(ctx, as_json)


@state_app.command("show")
def state_show(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Print the agent's state: the JSON object on stdout, its version on stderr."""
    _show_state(ctx, as_json)


@state_app.command("history")
def state_history(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The kept versions of the state, newest first (config `keep_state_versions`)."""
    from agentbox import render

    rows = [v.document() for v in session(ctx).store().state_history()]
    render.records(rows, ["version", "updated_at", "author", "generation", "state"], as_json,
                   title="state history", empty="no state written yet",
                   human={"updated_at": render.when, "state": _compact}, text=["state"])


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@state_app.command("set")
def state_set(
    ctx: typer.Context,
    file: Annotated[str, typer.Option("--file", "-f", metavar="FILE|-",
                                      help="The new state, a JSON object (- for stdin).",
                                      show_default=False)],
    as_json: JsonFlag = False,
) -> None:
    """Replace the state as an operator, under the inbox's lease like a run.

    Exit 75 while a worker holds the lease; 65 when the file is not a JSON
    object or is larger than `max_state`. Recorded in the state's history.
    """
    from agentbox import render
    from agentbox.errors import Busy
    from agentbox.jsonutil import loads_strict, type_name
    from agentbox.rules.lease import new_holder_id

    with open_source(file) as stream:
        value = loads_strict(stream.read(), "the state")
    if not isinstance(value, dict):
        from agentbox.errors import BadInput

        raise BadInput(f"the state must be a JSON object, not {type_name(value)}")
    sess = session(ctx)
    policy = sess.settings().policy
    store = sess.store()
    holder, now = new_holder_id(), sess.now()
    generation = store.acquire(holder, now, policy.lease_ttl)
    if generation is None:
        raise Busy("a worker holds the inbox's lease; the state was not changed (try again "
                   "when it is free)")
    try:
        version = store.set_state(holder, generation, now, value, policy)
    finally:
        store.release(holder, generation, sess.now())
    if version is None:
        raise Busy("the lease moved on before the state was written; nothing changed")
    if as_json:
        render.document(store.state().document())
    else:
        render.line(f"state set: version {version} (generation {generation})")


def _list_steps(ctx: typer.Context, status: str | None, as_json: bool) -> None:
    from agentbox import render
    from agentbox.rules.steps import check_state

    if status is not None:
        check_state(status)
    rows = [s.document() for s in session(ctx).store().steps(status)]
    render.records(rows, STEP_COLUMNS, as_json, title="steps", empty="no steps",
                   human={"started_at": render.when, "finished_at": render.when},
                   text=["error"])


StateFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
    "--state", metavar="started|done|failed|uncertain", help="Only steps in this state.",
    show_default=False)]


@steps_app.callback()
def steps(ctx: typer.Context, status: StateFlag = None, as_json: JsonFlag = False) -> None:
    """List the journal of steps (same as `steps list`)."""
    if ctx.invoked_subcommand is None:
        _list_steps(ctx, status, as_json)


@steps_app.command("list")
def steps_list(ctx: typer.Context, status: StateFlag = None, as_json: JsonFlag = False) -> None:
    """Every step of the journal, oldest try first."""
    _list_steps(ctx, status, as_json)


KeyArgument = Annotated[str, typer.Argument(metavar="KEY", help="The step's key.")]


@steps_app.command("show")
def steps_show(ctx: typer.Context, key: KeyArgument, as_json: JsonFlag = False) -> None:
    """One step: its state, its recorded output and its history. Exit 3 when there is
    no such KEY."""
    from agentbox import render

    store = session(ctx).store()
    found = store.step(key)
    if found is None:
        render.error(f"no step {key!r}")
        raise typer.Exit(Exit.NOT_AS_ASKED)
    story = [{"at": e.at, "action": e.action, "generation": e.generation, "detail": e.detail}
             for e in store.history("step", key)]
    if as_json:
        render.document({**found.document(with_output=True), "history": story})
        return
    doc = found.document(with_output=True)
    times = {"started_at": found.started_at, "finished_at": found.finished_at}
    render.pairs([(c, render.when(times[c]) if times.get(c) else doc[c])
                  for c in [*STEP_COLUMNS, "output"]], title=f"step {key}")
    render.records(story, ["at", "action", "generation", "detail"], False, title="history",
                   human={"at": render.when}, text=["detail"])


@steps_app.command("resolve")
def steps_resolve(
    ctx: typer.Context,
    key: KeyArgument,
    done: Annotated[Optional[bool], typer.Option(  # noqa: UP045
        "--done/--not-done", help="It did its work (a later try prints its output and runs "
        "nothing), or it did not (a later try runs it).", show_default=False)] = None,
    output_file: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output-file", metavar="FILE|-", help="With --done: the step's result, as its "
        "stdout would have been.", show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Settle a step whose outcome is unknown (uncertain, or started and never finished).

    Exit 3 when there is no such KEY or it is done or failed already (left as it is).
    """
    from agentbox import render
    from agentbox.errors import UsageError

    if done is None:
        raise UsageError("say --done or --not-done")
    if output_file is not None and not done:
        raise UsageError("--output-file goes with --done only")
    output = b""
    if output_file is not None:
        with open_source(output_file) as stream:
            output = stream.read()
    sess = session(ctx)
    was = sess.store().resolve_step(key, done, output, sess.now())
    settled = was in ("uncertain", "started")
    if as_json:
        render.document({"key": key, "outcome": "resolved" if settled else "unchanged",
                         "was": was, "status": ("done" if done else "failed") if settled
                         else was})
    elif was is None:
        render.line(f"no step {key!r}")
    elif settled:
        render.line(f"step {key!r} ({was}) resolved as {'done' if done else 'not done'}")
    else:
        render.line(f"step {key!r} is {was}; only an uncertain or unfinished step is resolved")
    raise typer.Exit(Exit.OK if settled else Exit.NOT_AS_ASKED)
