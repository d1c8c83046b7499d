"""schedule add | list | remove | tick: timers that feed the inbox (rule 5)."""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import complete_catch_up, duration_flag, time_flag

if TYPE_CHECKING:
    from agentbox.rules.records import Timer

schedule_app = typer.Typer(help="Timers: each due occurrence becomes an inbox event.",
                           no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")


def timer_doc(timer: "Timer") -> dict[str, Any]:
    import json

    fixed = timer.event_source is not None
    return {"name": timer.name, "due": timer.due, "every": timer.every,
            "catch_up": timer.catch_up, "payload": json.loads(timer.payload),
            "event_key": f"{timer.event_source}/{timer.event_id}" if fixed else None,
            "done": timer.done, "created_at": timer.created_at}


def _every(seconds: int | None) -> str:
    from agentbox.durations import format_duration

    return "once" if seconds is None else format_duration(seconds)


@schedule_app.command("add")
def schedule_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The timer's name; events are keyed "
                                        "NAME@scheduled-time.")],
    every: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--every", metavar="DURATION", help="Repeat at this interval (90s, 15m, 4h, 1d).",
        show_default=False)] = None,
    start: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--start", metavar="TIME",
        help="First occurrence of an --every timer (Unix seconds, ISO 8601, "
        "'now' or '+DURATION'); default: now.", show_default=False)] = None,
    at: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--at", metavar="TIME",
        help="Fire once at this time (Unix seconds, ISO 8601, 'now' or '+DURATION').",
        show_default=False)] = None,
    payload: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--payload", "-p", metavar="JSON", help="JSON object carried by every event (default {}).",
        show_default=False)] = None,
    catch_up: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--catch-up", metavar="coalesce|each", autocompletion=complete_catch_up,
        help="Missed occurrences: 'coalesce' into one event (default) or "
        "'each' their own event, up to catch_up_limit.", show_default=False)] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Change an existing timer of this name (and re-arm its due "
        "time).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a timer. Re-adding the same timer changes nothing (exit 0); a changed one
    needs --replace (else exit 3)."""
    from agentbox import render
    from agentbox.errors import UsageError
    from agentbox.jsonutil import parse_payload
    from agentbox.rules.records import TimerSpec

    if (every is None) == (at is None):
        raise UsageError("give --every DURATION or --at TIME (one of them)")
    if at is not None and (start is not None or catch_up is not None):
        raise UsageError("--start and --catch-up go with --every, not --at")
    from agentbox.rules.records import CATCH_UP_MODES

    if catch_up is not None and catch_up not in CATCH_UP_MODES:
        raise UsageError(f"--catch-up is one of {', '.join(CATCH_UP_MODES)}, not {catch_up!r}")
    sess = session(ctx)
    now = sess.now()
    interval = duration_flag("--every", every)
    when = time_flag("--at" if at is not None else "--start", at or start or "now", now,
                     sess.zone)
    settings = sess.settings()
    body = "{}" if payload is None else parse_payload(payload, settings.policy.max_payload)
    spec = TimerSpec(name=name, due=when, every=interval, payload=body,
                     catch_up=catch_up or "coalesce")
    outcome = sess.store().add_timer(spec, now, replace=replace)
    if as_json:
        render.document({"outcome": outcome, "name": name, "due": when, "every": interval,
                         "catch_up": spec.catch_up})
        return
    if outcome == "unchanged":
        render.line(f"timer {name} unchanged")
        return
    render.line(f"{outcome} timer {name}: {_every(interval)}, "
                f"{'first ' if interval else ''}due {render.when(when)}")


@schedule_app.command("list")
def schedule_list(
    ctx: typer.Context,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Include one-off timers that already fired.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Timers by due time."""
    from agentbox import render
    from agentbox.jsonutil import canonical

    rows = [timer_doc(t) for t in session(ctx).store().timers(include_done=show_all)]
    render.records(rows, ["name", "due", "every", "catch_up", "payload", "event_key"], as_json,
                   title="timers", empty="no timers",
                   human={"due": render.when, "every": _every, "payload": canonical},
                   text=["payload"])


@schedule_app.command("remove")
def schedule_remove(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The timer to remove.")],
) -> None:
    """Remove a timer (an approval's pending expiry cannot be removed)."""
    from agentbox import render
    from agentbox.errors import BadInput

    sess = session(ctx)
    if not sess.store().remove_timer(name, sess.now()):
        raise BadInput(f"no timer named {name!r}")
    render.line(f"removed timer {name}")


@schedule_app.command("tick")
def schedule_tick(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """One scheduler pass: due timers become inbox events (`run` does this too)."""
    from agentbox import render

    sess = session(ctx)
    fired = sess.store().tick(sess.now(), sess.settings().policy)
    if as_json:
        render.document({"due": fired})
    else:
        render.line(f"{fired} due timer(s) fired")
