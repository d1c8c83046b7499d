"""schedule add | list | remove | tick: timers that feed the inbox (rule 5)."""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import checked_flag, complete_catch_up, duration_flag, time_flag

if TYPE_CHECKING:
    from datetime import tzinfo

    from agentbox.cli.session import Session
    from agentbox.rules.timers import Timer

schedule_app = typer.Typer(help="Timers: each due occurrence becomes an inbox event.",
                           no_args_is_help=True)
app.add_typer(schedule_app, name="schedule")


def timer_doc(timer: "Timer") -> dict[str, Any]:
    import json

    fixed = timer.event_source is not None
    return {"name": timer.name, "due": timer.due, "every": timer.every,
            "cron": timer.cron, "tz": timer.tz,
            "catch_up": timer.catch_up, "payload": json.loads(timer.payload),
            "event_key": f"{timer.event_source}/{timer.event_id}" if fixed else None,
            "done": timer.done, "created_at": timer.created_at}


def _repeats(every: int | None, cron: str | None, tz: str | None) -> str:
    from agentbox.durations import format_duration

    if cron is not None:
        return f"cron {cron} ({tz})"
    return "once" if every is None else f"every {format_duration(every)}"


def _local_zone(sess: "Session") -> "tzinfo | None":
    """The zone times are shown in beside UTC; None if the environment names none we read."""
    from agentbox.errors import UsageError

    try:
        return sess.zone()
    except UsageError:
        return None


def _cron_schedule(sess: "Session", cron: str, tz: str | None, now: int) -> tuple[str, str, int]:
    """(expression, zone, first due) of a cron timer added at ``now``."""
    from agentbox.calendar import check_cron, zone
    from agentbox.errors import BadInput, UsageError
    from agentbox.rules.timers import cron_due

    try:
        expr = check_cron(cron)
    except BadInput as exc:
        raise BadInput(f"--cron: {exc}") from None
    if tz is not None:
        try:
            name = zone(tz).key
        except BadInput as exc:
            raise BadInput(f"--tz: {exc}") from None
    else:
        name = sess.zone().key
        if name is None:
            raise UsageError("the local time zone has no name a timer can keep; "
                             "give --tz ZONE or set one with `agentbox config set timezone`")
    return expr, name, cron_due(expr, name, now)


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
    cron: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--cron", metavar="'MIN HOUR DOM MON DOW'",
        help="Fire at the local times a cron expression names, e.g. '0 8 * * 1-5'; "
        "first due at its next match.", show_default=False)] = None,
    tz: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--tz", metavar="ZONE",
        help="The IANA time zone of --cron (default: config timezone, else TZ, else the "
        "system's).", show_default=False)] = None,
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
    from agentbox.rules.timers import TimerSpec

    if [every, at, cron].count(None) != 2:
        raise UsageError("give one of --every DURATION, --at TIME or --cron EXPRESSION")
    if start is not None and every is None:
        raise UsageError("--start goes with --every")
    if at is not None and catch_up is not None:
        raise UsageError("--catch-up goes with --every or --cron, not --at")
    if tz is not None and cron is None:
        raise UsageError("--tz goes with --cron")
    from agentbox.rules.timers import check_catch_up

    if catch_up is not None:
        checked_flag("--catch-up", catch_up, check_catch_up)
    sess = session(ctx)
    now = sess.now()
    interval = duration_flag("--every", every)
    expr = zone = None
    if cron is not None:
        expr, zone, when = _cron_schedule(sess, cron, tz, now)
    else:
        when = time_flag("--at" if at is not None else "--start", at or start or "now", now,
                         sess.zone)
    settings = sess.settings()
    body = "{}" if payload is None else parse_payload(payload, settings.policy.max_payload)
    spec = TimerSpec(name=name, due=when, every=interval, payload=body,
                     catch_up=catch_up or "coalesce", cron=expr, tz=zone)
    outcome = sess.store().add_timer(spec, now, replace=replace)
    if as_json:
        render.document({"outcome": outcome, "name": name, "due": when, "every": interval,
                         "cron": expr, "tz": zone, "catch_up": spec.catch_up})
        return
    if outcome == "unchanged":
        render.line(f"timer {name} unchanged")
        return
    shown = render.when(when)
    local = render.when_in(when, zone or _local_zone(sess))
    render.line(f"{outcome} timer {name}: {_repeats(interval, expr, zone)}, "
                f"{'' if at is not None else 'first '}due {local} ({shown})")


@schedule_app.command("list")
def schedule_list(
    ctx: typer.Context,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Include spent timers: one-offs that fired, schedules past 9999.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Timers by due time: UTC, and the local time of the timer's zone (cron) or of yours."""
    from agentbox import render
    from agentbox.jsonutil import canonical

    sess = session(ctx)
    rows = [timer_doc(t) for t in sess.store().timers(include_done=show_all)]
    if not as_json:
        mine = _local_zone(sess) if any(r["tz"] is None for r in rows) else None
        for row in rows:
            row["local"] = render.when_in(row["due"], row["tz"] or mine)
            row["repeats"] = _repeats(row["every"], row["cron"], row["tz"])
    render.records(rows, ["name", "due", "local", "repeats", "catch_up", "payload", "event_key"],
                   as_json, title="timers", empty="no timers",
                   human={"due": render.when, "payload": canonical},
                   text=["repeats", "payload"])


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
