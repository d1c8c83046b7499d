"""dispatch and outbox: sending the held messages, and looking after them.

``dispatch`` keeps stdout for data only: the merged body when there is no
sender command (so cron can pipe it on), or the JSON document with
``--json`` (with ``--watch``, one per line). What happened is said on
stderr. The sending itself is :mod:`agentbox.dispatcher`'s.
"""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import checked_flag, command_flag, complete_delivery, duration_flag
from agentbox.rules.records import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentbox.cli.session import Session
    from agentbox.config import Settings
    from agentbox.dispatcher import Dispatcher, DispatchReport, Planned, Sent
    from agentbox.rules.outbox import Dispatch, Wait

# The table; JSON objects carry these names and the message body too.
LIST_COLUMNS = ["id", "state", "urgent", "dispatch_key", "created", "sent", "body", "error"]
PREVIEW = 60  # characters of a body the table shows; `--json` has it whole


def _preview(body: str) -> str:
    """The start of a message body on one line, cut with an ellipsis."""
    flat = " ".join(body.split())
    return flat if len(flat) <= PREVIEW else flat[:PREVIEW - 1].rstrip() + "…"


# The dispatch's messages after each fate, for --json.
_STATE_AFTER = {"sent": "sent", "late-sent": "sent", "failed": "held", "retry": "sending",
                "unknown": "sending", "park": "uncertain"}


def _claim_doc(dispatch: "Dispatch", sent: "Sent | None", printed: bool) -> dict[str, Any]:
    """The --json document of a claimed dispatch; ``sent`` None: the body is printed."""
    action, again = sent.fate(dispatch) if sent is not None else ("sent", None)
    doc: dict[str, Any] = {
        "outcome": "sent" if sent is None else sent.outcome, "key": dispatch.key,
        "mode": dispatch.mode, "attempt": dispatch.tries, "max_tries": dispatch.max_tries,
        "urgent": dispatch.urgent, "messages": list(dispatch.message_ids),
        "error": None if sent is None else sent.error,
        "state": _STATE_AFTER.get(action) if sent is None or sent.recorded else None,
        "resend_after": again, "channel": dispatch.channel,
    }
    if printed:
        doc["body"] = dispatch.body
    return doc


def _wait_doc(wait: "Wait", channel: str) -> dict[str, Any]:
    return {"outcome": "waiting" if wait.held else "nothing", "held": wait.held,
            "next_send_at": wait.until if wait.held else None, "in_flight": wait.in_flight,
            "in_flight_until": wait.in_flight_until, "channel": channel,
            "reason": wait.reason if wait.held else None}


# What holds the messages, as `dispatch`, `outbox` and `status` say it.
HELD_BY = {"gap": "the gap allows the next send at", "quiet hours": "quiet hours hold them "
           "until", "max_per_day": "the day's max_per_day is reached; they wait until"}


def held_text(wait: "Wait", now: int) -> str:
    from agentbox import render
    from agentbox.durations import format_duration

    until = wait.until if wait.until is not None else now
    return (f"{wait.held} message(s) held; {HELD_BY.get(wait.reason or 'gap', 'until')} "
            f"{render.when(until)} (in {format_duration(max(until - now, 1))})")


def _say_wait(wait: "Wait", now: int, channel: str | None = None) -> None:
    from agentbox import render

    flight = ""
    if wait.in_flight:
        flight = (f"; {wait.in_flight} dispatch(es) in flight, claim deadline "
                  f"{render.when(wait.in_flight_until)}")
    named = f"channel {channel}: " if channel is not None else ""
    if not wait.held:
        render.notice(f"{named}nothing to send{flight}")
        return
    render.notice(f"{named}{held_text(wait, now)}{flight}")


def _say_claim(dispatch: "Dispatch", sent: "Sent") -> None:
    from agentbox import render

    details = [f"{len(dispatch.message_ids)} message(s)"]
    if dispatch.urgent:
        details.append("urgent")
    if dispatch.resend:
        details.append(f"try {dispatch.tries} of {dispatch.max_tries} under the same key")
    what = f"dispatch {dispatch.key} ({', '.join(details)})"
    error = sent.error
    if not sent.recorded:
        render.notice(f"{what}: another dispatcher settled it first; this try's word "
                      f"({sent.outcome}) changed nothing")
    action, again = sent.fate(dispatch)
    resolve = (f"check the channel, then run `agentbox outbox resolve {dispatch.key} --sent` "
               "or `--unsent`")
    if action in ("sent", "late-sent"):
        render.notice(f"sent {what}")
    elif action == "failed":
        render.error(f"{error}; not delivered: the messages of {what} are held again for "
                     "the next dispatch")
    elif action == "retry":
        render.error(f"{error}; not delivered by this try, but an earlier one may have been: "
                     f"the messages of {what} are kept under the same key and tried again by "
                     f"the first dispatch after {render.when(again)}")
    elif action == "unknown":
        render.error(f"{error}; outcome not known: {what} is resent under the same key by "
                     f"the first dispatch after {render.when(again)}")
    elif dispatch.mode == "at-least-once":
        render.error(f"{error}; no certain word after {dispatch.tries} of "
                     f"{dispatch.max_tries} tries: {what} is uncertain and will not be tried "
                     f"again; {resolve}")
    else:
        render.error(f"{error}; outcome not known: {what} is uncertain and will not be "
                     f"resent; {resolve}")


@app.command(context_settings={"allow_interspersed_args": False})
def dispatch(
    ctx: typer.Context,
    command: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
        metavar="[-- CMD ARGS...]", help="The sender: gets the merged body on stdin.",
        show_default=False)] = None,
    via: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--via", help="The sender as one string, split like a shell would (no shell runs).",
        show_default=False)] = None,
    mode: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--mode", metavar="at-least-once|at-most-once", autocompletion=complete_delivery,
        help="at-least-once or at-most-once: what an unknown outcome leads to "
        "(default: config `delivery`).", show_default=False)] = None,
    gap: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--gap", help="Minimum time between sends, e.g. 1h (default: config `outbox_gap`).",
        show_default=False)] = None,
    timeout: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--timeout", help="Stop the sender after this long, e.g. 60s (default: config "
        "`send_timeout`).", show_default=False)] = None,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Send until stopped: as soon as the gap allows, an urgent message "
        "at once, an unanswered at-least-once send again after its claim deadline. "
        "Exits 0 on SIGTERM or SIGINT.")] = False,
    channel: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--channel", metavar="NAME", help="Serve this channel only (default: every channel "
        "in config.toml, `default` first).", show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Send the held messages merged into one, at most once per gap, on every channel.

    Each channel sends by its own sender, gap, delivery mode, quiet hours and
    daily cap; none waits for another. The body goes on the sender's stdin, or
    on stdout when no sender is set. Exit 0 sent, nothing to send, or the
    messages are held (gap, quiet hours, cap); 1 a sender failed or timed out;
    75 the database stayed busy; 128 + the signal when SIGTERM or SIGINT
    stopped it mid-send (the outcome is then not known).
    """
    from agentbox import render
    from agentbox.dispatcher import PrintSender, watch_channels
    from agentbox.rules.outbox import check_mode

    if mode is not None:
        checked_flag("--mode", mode, check_mode)
    argv = command_flag("--via", via, command)
    sess = session(ctx)
    settings = sess.settings({"delivery": mode, "outbox_gap": duration_flag("--gap", gap),
                              "send_timeout": duration_flag("--timeout", timeout)})
    dispatchers = channel_dispatchers(sess, settings, argv, channel,
                                      lambda claimed: _print(claimed, as_json, watch))
    commanded = {d.channel: not isinstance(d.sender, PrintSender) for d in dispatchers}
    stop = dispatchers[0].stop
    if watch:
        from agentbox.durations import format_duration

        for d in dispatchers:
            which = "" if len(dispatchers) == 1 else f"channel {d.channel}: "
            render.notice(f"watching the outbox: {which}{d.policy.delivery}, at most one send "
                          f"per {format_duration(d.policy.outbox_gap)} (urgent ones at once)")
        from agentbox.cli.listening import long_lived

        long_lived()
        with stop.installed():
            watch_channels(dispatchers, lambda report: _said(report, commanded, as_json), stop)
        render.notice(f"stopped by {stop.name}")
        return
    docs: dict[str, Any] = {}
    code = 0
    with stop.installed():
        for d in dispatchers:
            if stop.requested:
                break
            report = d.dispatch_once()
            named = len(dispatchers) > 1
            if report.wait is not None:
                if as_json:
                    docs[d.channel] = _wait_doc(report.wait, d.channel)
                else:
                    _say_wait(report.wait, sess.now(), d.channel if named else None)
                continue
            docs[d.channel] = _say(report, commanded[d.channel], as_json, watch, many=named)
            code = code or report.exit_code
    if as_json:
        shown = {k: v for k, v in docs.items() if v is not None}
        if len(dispatchers) == 1:
            if shown:
                render.document(next(iter(shown.values())))
        else:
            render.document({"channels": shown})
    raise typer.Exit(code)


def channel_plans(sess: "Session", settings: "Settings", only: "str | None" = None
                  ) -> "list[Planned]":
    """Each channel the user has (``only`` one of them) with the policy and the quiet
    hours it dispatches under: a flag (`--gap`, `--mode`) applies to every channel."""
    from agentbox import channels, config, paths
    from agentbox.dispatcher import Planned, Quiet
    from agentbox.errors import UsageError

    policy = settings.policy
    path = paths.config_path()
    found = channels.configured(config.load(path), path, sess.user_or_none() or "", settings)
    if only is not None and only not in found:
        raise UsageError(f"--channel: unknown channel {only!r} (known: {', '.join(found)})")
    flagged = {k for k, o in settings.origins.items() if o == "flag"}
    plans = []
    zone = None
    for ch in found.values():
        if only is not None and ch.name != only:
            continue
        mine = policy._replace(
            outbox_gap=policy.outbox_gap if "outbox_gap" in flagged else ch.gap,
            delivery=policy.delivery if "delivery" in flagged else ch.delivery)
        quiet = None
        if ch.quiet_hours is not None or ch.max_per_day is not None:
            zone = zone or sess.zone()
            quiet = Quiet(zone, ch.quiet_hours, ch.max_per_day, ch.urgent_in_quiet_hours)
        plans.append(Planned(ch.name, mine, quiet, ch.sender))
    return plans


def channel_dispatchers(sess: "Session", settings: "Settings", argv: "list[str] | None",
                        only: "str | None",
                        write: "Callable[[Dispatch], None]") -> "list[Dispatcher]":
    """A dispatcher per channel the user has (``only`` one of them), sharing one stop:
    a flag (`--via`, `--gap`, `--mode`) applies to every channel served."""
    import os

    from agentbox.dispatcher import CommandSender, Dispatcher, PrintSender, Sender
    from agentbox.stopping import Stop

    store, stop = sess.store(), Stop()
    made = []
    for plan in channel_plans(sess, settings, only):
        sender_argv = argv or plan.sender
        sender: Sender
        if sender_argv is None:
            sender = PrintSender(write)
        else:
            # What the sender needs to find the inbox, beside our environment.
            sender = CommandSender(sender_argv, plan.policy.send_timeout, {
                **os.environ, "AGENTBOX_USER": sess.user_or_none() or "",
                "AGENTBOX_DB": sess.db_target, "AGENTBOX_CHANNEL": plan.name})
        made.append(Dispatcher(store, plan.policy, sender, sess.now, stop, plan.name,
                               plan.quiet, user=sess.user_or_none() or "",
                               public_url=settings.public_url))
    return made


def _print(dispatch: "Dispatch", as_json: bool, watch: bool) -> None:
    """The delivery when there is no sender: the body (in its JSON document) on stdout."""
    from agentbox import render

    if as_json:
        (render.json_line if watch else render.document)(
            _claim_doc(dispatch, None, printed=True))
    else:
        render.data(dispatch.body)


def _said(report: "DispatchReport", commanded: dict[str, bool], as_json: bool) -> None:
    """A watching dispatcher's send, as :func:`_say` says it."""
    assert report.dispatch is not None
    _say(report, commanded[report.dispatch.channel], as_json, watch=True)


def _say(report: "DispatchReport", commanded: bool, as_json: bool, watch: bool,
         many: bool = False) -> dict[str, Any] | None:
    """A claimed dispatch's end: its JSON document (printed already when the printing
    was the delivery; with ``many`` channels, returned to print with the others), else
    lines on stderr."""
    from agentbox import render

    claimed, sent = report.dispatch, report.sent
    assert claimed is not None and sent is not None
    if not as_json:
        _say_claim(claimed, sent)
    elif commanded:
        doc = _claim_doc(claimed, sent, printed=False)
        if watch:
            render.json_line(doc)
        else:
            return doc
    return None


outbox_app = typer.Typer(help="The held, in-flight and uncertain messages.",
                         no_args_is_help=False, invoke_without_command=True)
app.add_typer(outbox_app, name="outbox")

AllFlag = Annotated[bool, typer.Option("--all", help="Include messages already sent.")]
LimitFlag = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--limit", "-n", min=1, help="Show at most the newest N.", show_default=False)]


def held_waits(sess: "Session") -> "dict[str, Wait | None]":
    """Each channel with held messages, and why they wait now (None: they may go; a
    channel config.toml no longer has waits for ever, as ``unknown channel``)."""
    from agentbox.rules.outbox import Wait

    held = sess.store().channels_held()
    if not held:
        return {}
    dispatchers = {d.channel: d for d in channel_dispatchers(
        sess, sess.settings(), None, None, lambda claimed: None)}
    return {name: dispatchers[name].waiting() if name in dispatchers
            else Wait(n, None, reason="unknown channel") for name, n in held.items()}


def _list_outbox(ctx: typer.Context, show_all: bool, limit: int | None, as_json: bool) -> None:
    from agentbox import render
    from agentbox.rules.records import OPEN_OUTBOX_STATES, OUTBOX_LISTED, OUTBOX_STATES

    sess = session(ctx)
    messages = sess.store().outbox(OUTBOX_STATES if show_all else OPEN_OUTBOX_STATES,
                                   limit or OUTBOX_LISTED)
    waits = held_waits(sess) if any(m.state == "held" for m in messages) else {}
    rows = [{"id": m.id, "state": m.state, "urgent": m.urgent, "dispatch_key": m.dispatch_key,
             "created": m.created_at, "sent": m.sent_at, "error": m.error, "body": m.body,
             "channel": m.channel,
             "held_reason": _reason(waits.get(m.channel)) if m.state == "held" else None}
            for m in messages]
    columns = LIST_COLUMNS
    if any(m.channel != DEFAULT_CHANNEL for m in messages):
        columns = [*LIST_COLUMNS[:2], "channel", *LIST_COLUMNS[2:]]
    render.records(rows, columns, as_json, title="outbox",
                   empty="no messages" if show_all else "nothing held, sending or uncertain",
                   human={"created": render.when, "sent": render.when, "body": _preview},
                   text=["body", "error"])
    if not as_json:
        now = sess.now()
        for name, wait in waits.items():
            if wait is not None and wait.reason not in (None, "gap"):
                render.notice(f"channel {name}: {held_text(wait, now)}")


def _reason(wait: "Wait | None") -> str | None:
    return None if wait is None else wait.reason


@outbox_app.callback()
def outbox(ctx: typer.Context, show_all: AllFlag = False, limit: LimitFlag = None,
           as_json: JsonFlag = False) -> None:
    """List held, sending and uncertain messages (same as `outbox list`)."""
    if ctx.invoked_subcommand is None:
        _list_outbox(ctx, show_all, limit, as_json)


@outbox_app.command("list")
def outbox_list(ctx: typer.Context, show_all: AllFlag = False, limit: LimitFlag = None,
                as_json: JsonFlag = False) -> None:
    """List held, sending and uncertain messages, oldest first (--all: sent ones too)."""
    _list_outbox(ctx, show_all, limit, as_json)


@outbox_app.command("resolve")
def outbox_resolve(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="The dispatch key (see `outbox list`).")],
    sent: Annotated[bool, typer.Option("--sent", help="It did reach the channel.")] = False,
    unsent: Annotated[bool, typer.Option(
        "--unsent", help="It did not: hold its messages again for the next dispatch.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Settle an uncertain dispatch after checking the channel.

    Exit 3 if the dispatch is not uncertain, 65 if there is no such key.
    """
    from agentbox import render
    from agentbox.errors import UsageError

    if sent == unsent:
        raise UsageError("say --sent or --unsent (one of them)")
    sess = session(ctx)
    count = sess.store().resolve_dispatch(key, sent, sess.now())
    verdict = "sent" if sent else "unsent"
    if as_json:
        render.document({"key": key, "resolved": verdict, "messages": count})
    elif sent:
        render.line(f"dispatch {key} resolved as sent: {count} message(s) marked sent")
    else:
        render.line(f"dispatch {key} resolved as unsent: {count} message(s) held again for "
                    "the next dispatch")
