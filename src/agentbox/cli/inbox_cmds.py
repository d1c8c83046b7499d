"""status, dead and replay: the inbox seen and mended from the command line."""

from typing import Annotated, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.errors import Exit


@app.command()
def status(ctx: typer.Context, as_json: JsonFlag = False, all_users: Annotated[bool, typer.Option(
        "--all-users", help="Every user's inbox, as `agentbox inboxes` lists them.")] = False,
           ) -> None:
    """Counts by state, the lease, the next timer, the held messages and any pause."""
    from agentbox import render
    from agentbox.spelling import describe_pause, pause_document

    if all_users:
        from agentbox.cli.upkeep_cmds import show_inboxes

        show_inboxes(ctx, as_json)
        return
    from agentbox.cli.dispatch_cmds import held_text, held_waits

    sess = session(ctx)
    store = sess.store()
    state = store.status()
    waits = {}
    if state.outbox["held"]:
        from agentbox.errors import UsageError

        try:
            waits = held_waits(sess)
        except UsageError as exc:  # a channel written wrong must not hide the status
            render.notice(f"held messages' reasons unknown: {exc}")
    lease = state.lease
    timer = state.next_timer
    doc = {
        "user": sess.user_or_none(),  # None only where --db stands in for a bad login name
        "db": store.location,
        "events": state.events,
        "outbox": state.outbox,
        "lease": None if lease is None else {"holder": lease.holder,
                                             "generation": lease.generation,
                                             "until": lease.until,
                                             "released": lease.released},
        "next_timer": None if timer is None else {"name": timer.name, "due": timer.due},
        "paused": pause_document(state.paused),
        "held": {name: {"messages": w.held, "reason": w.reason,
                        "until": w.until if w.reason is not None else None}
                 for name, w in waits.items() if w is not None},
    }
    if as_json:
        render.document(doc)
        return
    now = sess.now()
    lease_text = "free (never taken)"
    if lease is not None and not lease.released and lease.until >= now:
        lease_text = (f"held by {lease.holder}, generation {lease.generation}, until "
                      f"{render.when(lease.until)}")
    elif lease is not None:
        how = "released" if lease.released else "expired"
        lease_text = (f"free ({how} at {render.when(lease.until)}), generation "
                      f"{lease.generation}; last held by {lease.holder}")
    events = state.events
    render.pairs([
        ("user", doc["user"]),
        ("database", doc["db"]),
        ("events", ", ".join(f"{n} {s}" for s, n in events.items())),
        ("outbox", ", ".join(f"{n} {s}" for s, n in state.outbox.items())),
        ("lease", lease_text),
        ("next timer", "none" if timer is None else f"{timer.name} at {render.when(timer.due)}"),
        ("paused", "no" if state.paused is None else describe_pause(state.paused)),
        *[(f"held on {name}", held_text(w, now)) for name, w in waits.items()
          if w is not None and w.reason not in (None, "gap")],
    ], title="agentbox status")


@app.command()
def resume(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Lift the inbox's pause (a tripped breaker or a spent budget).

    A budget pause stays lifted for the rest of its local day: the budget is
    not checked again until the next. Exit 0 either way; "not paused" when
    there was none.
    """
    from agentbox import render
    from agentbox.spelling import pause_document

    sess = session(ctx)
    lifted = sess.store().resume(sess.now())
    if as_json:
        render.document({"resumed": lifted is not None, "paused": pause_document(lifted)})
    elif lifted is None:
        render.line("not paused")
    else:
        render.line(f"resumed (was paused since {render.when(lifted.since)}: {lifted.reason})")


dead_app = typer.Typer(help="Events that ran out of attempts.", no_args_is_help=False,
                       invoke_without_command=True)
app.add_typer(dead_app, name="dead")


def _list_dead(ctx: typer.Context, as_json: bool, limit: int | None) -> None:
    from agentbox import render
    from agentbox.cli.events_cmds import event_doc

    rows = [event_doc(e) for e in session(ctx).store().dead(limit)]
    render.records(rows, ["id", "source", "source_id", "attempts", "error", "updated_at"],
                   as_json, title="dead events", empty="none",
                   human={"updated_at": render.when}, text=["error"])


DeadLimit = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--limit", "-n", min=1, help="Show at most the oldest N.", show_default=False)]


@dead_app.callback()
def dead(ctx: typer.Context, limit: DeadLimit = None, as_json: JsonFlag = False) -> None:
    """List dead events (same as `dead list`)."""
    if ctx.invoked_subcommand is None:
        _list_dead(ctx, as_json, limit)


@dead_app.command("list")
def dead_list(ctx: typer.Context, limit: DeadLimit = None, as_json: JsonFlag = False) -> None:
    """List dead events, oldest first."""
    _list_dead(ctx, as_json, limit)


@dead_app.command("show")
def dead_show(ctx: typer.Context, event_id: Annotated[int, typer.Argument(
        metavar="ID", help="The event id.")], as_json: JsonFlag = False) -> None:
    """An event's payload, error and whole history (any event, as `events show`)."""
    from agentbox.cli.events_cmds import show_event

    show_event(session(ctx).store(), event_id, as_json)


@app.command()
def replay(
    ctx: typer.Context,
    ids: Annotated[Optional[list[int]], typer.Argument(  # noqa: UP045
        metavar="ID...", help="Dead event ids to replay.", show_default=False)] = None,
    replay_all: Annotated[bool, typer.Option("--all", help="Replay every dead event.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Dead events back to pending with attempts reset (same key, no new row).

    Exit 3 when some named event was not dead and was left alone.
    """
    from agentbox import render
    from agentbox.errors import BadInput, UsageError

    if bool(ids) == replay_all:
        raise UsageError("name event ids or --all, not both and not neither")
    sess = session(ctx)
    store = sess.store()
    if ids:
        unknown = [i for i in ids if store.event(i) is None]
        if unknown:
            raise BadInput(f"no event with id {', '.join(map(str, unknown))}")
    replayed = store.replay(None if replay_all else sorted(set(ids or [])), sess.now())
    left = sorted(set(ids or []) - set(replayed))
    if as_json:
        render.document({"replayed": replayed, "not_dead": left})
    else:
        render.line(f"replayed {len(replayed)} event(s)"
                    + (f": {', '.join(map(str, replayed))}" if replayed else ""))
        for i in left:
            event = store.event(i)
            render.line(f"event {i} is {event.status if event else 'gone'}, not dead: left alone")
    raise typer.Exit(Exit.NOT_AS_ASKED if left else Exit.OK)


UsageLimit = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--limit", "-n", min=1, help="Show at most the newest N runs.", show_default=False)]


@app.command()
def usage(ctx: typer.Context, limit: UsageLimit = None, as_json: JsonFlag = False) -> None:
    """What the runs' answers said they spent, newest first, and today's totals (the
    local day of the `timezone` setting, which the budgets count)."""
    from agentbox import render
    from agentbox.calendar import local_day

    sess = session(ctx)
    store = sess.store()
    day = local_day(sess.now(), sess.zone())
    tokens, cost = store.spent(day)
    runs = [{"at": r.at, "generation": r.generation, "events": list(r.events),
             "tokens": r.tokens, "cost": r.cost} for r in store.usage(limit)]
    today = {"tokens": int(tokens), "cost": cost}
    if as_json:
        render.document({"today": today, "day": {"start": day[0], "end": day[1]},
                         "runs": runs})
        return
    render.line(f"today (from {render.when(day[0])}): {today['tokens']} tokens, cost {cost:g}")
    render.records(runs, ["at", "generation", "events", "tokens", "cost"], False,
                   title="usage by run", empty="no run reported usage",
                   human={"at": render.when,
                          "events": lambda ids: ", ".join(map(str, ids))})
