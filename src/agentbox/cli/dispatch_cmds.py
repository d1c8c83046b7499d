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

if TYPE_CHECKING:
    from agentbox.dispatcher import DispatchReport, Sent
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
        "resend_after": again,
    }
    if printed:
        doc["body"] = dispatch.body
    return doc


def _wait_doc(wait: "Wait") -> dict[str, Any]:
    return {"outcome": "waiting" if wait.held else "nothing", "held": wait.held,
            "next_send_at": wait.until if wait.held else None, "in_flight": wait.in_flight,
            "in_flight_until": wait.in_flight_until}


def _say_wait(wait: "Wait", now: int) -> None:
    from agentbox import render
    from agentbox.durations import format_duration

    flight = ""
    if wait.in_flight:
        flight = (f"; {wait.in_flight} dispatch(es) in flight, claim deadline "
                  f"{render.when(wait.in_flight_until)}")
    if not wait.held:
        render.notice(f"nothing to send{flight}")
        return
    until = wait.until if wait.until is not None else now
    render.notice(f"{wait.held} message(s) held; the gap allows the next send at "
                  f"{render.when(until)} (in {format_duration(max(until - now, 1))}){flight}")


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
    as_json: JsonFlag = False,
) -> None:
    """Send the held messages merged into one, at most once per gap.

    The body goes on the sender's stdin, or on stdout when no sender is set.
    Exit 0 sent, nothing to send, or the gap has not passed; 1 the sender
    failed or timed out; 75 the database stayed busy; 128 + the signal when
    SIGTERM or SIGINT stopped it mid-send (the outcome is then not known).
    """
    import os

    from agentbox import render
    from agentbox.dispatcher import CommandSender, Dispatcher, PrintSender, Sender
    from agentbox.rules.outbox import check_mode

    if mode is not None:
        checked_flag("--mode", mode, check_mode)
    argv = command_flag("--via", via, command)
    sess = session(ctx)
    settings = sess.settings({"delivery": mode, "outbox_gap": duration_flag("--gap", gap),
                              "send_timeout": duration_flag("--timeout", timeout)})
    policy = settings.policy
    argv = argv or settings.sender
    sender: Sender
    if argv is None:
        sender = PrintSender(lambda claimed: _print(claimed, as_json, watch))
    else:
        # What the sender needs to find the inbox, beside our environment.
        sender = CommandSender(argv, policy.send_timeout, {
            **os.environ, "AGENTBOX_USER": sess.user_or_none() or "",
            "AGENTBOX_DB": sess.db_target})
    dispatcher = Dispatcher(sess.store(), policy, sender, sess.now,
                            user=sess.user_or_none() or "", public_url=settings.public_url)
    if watch:
        from agentbox.durations import format_duration

        render.notice(f"watching the outbox: {policy.delivery}, at most one send per "
                      f"{format_duration(policy.outbox_gap)} (urgent ones at once)")
        with dispatcher.stop.installed():
            dispatcher.watch(lambda report: _say(report, argv is not None, as_json, watch))
        render.notice(f"stopped by {dispatcher.stop.name}")
        return
    with dispatcher.stop.installed():
        report = dispatcher.dispatch_once()
    if report.wait is not None:
        if as_json:
            render.document(_wait_doc(report.wait))
        else:
            _say_wait(report.wait, sess.now())
        return
    _say(report, argv is not None, as_json, watch)
    raise typer.Exit(report.exit_code)


def _print(dispatch: "Dispatch", as_json: bool, watch: bool) -> None:
    """The delivery when there is no sender: the body (in its JSON document) on stdout."""
    from agentbox import render

    if as_json:
        (render.json_line if watch else render.document)(
            _claim_doc(dispatch, None, printed=True))
    else:
        render.data(dispatch.body)


def _say(report: "DispatchReport", commanded: bool, as_json: bool, watch: bool) -> None:
    """A claimed dispatch's end: its JSON document (printed already when the printing
    was the delivery), else lines on stderr."""
    from agentbox import render

    claimed, sent = report.dispatch, report.sent
    assert claimed is not None and sent is not None
    if not as_json:
        _say_claim(claimed, sent)
    elif commanded:
        (render.json_line if watch else render.document)(
            _claim_doc(claimed, sent, printed=False))


outbox_app = typer.Typer(help="The held, in-flight and uncertain messages.",
                         no_args_is_help=False, invoke_without_command=True)
app.add_typer(outbox_app, name="outbox")

AllFlag = Annotated[bool, typer.Option("--all", help="Include messages already sent.")]
LimitFlag = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--limit", "-n", min=1, help="Show at most the newest N.", show_default=False)]


def _list_outbox(ctx: typer.Context, show_all: bool, limit: int | None, as_json: bool) -> None:
    from agentbox import render
    from agentbox.rules.records import OPEN_OUTBOX_STATES, OUTBOX_STATES

    messages = session(ctx).store().outbox(OUTBOX_STATES if show_all else OPEN_OUTBOX_STATES,
                                           limit or 1000)
    rows = [{"id": m.id, "state": m.state, "urgent": m.urgent, "dispatch_key": m.dispatch_key,
             "created": m.created_at, "sent": m.sent_at, "error": m.error, "body": m.body}
            for m in messages]
    render.records(rows, LIST_COLUMNS, as_json, title="outbox",
                   empty="no messages" if show_all else "nothing held, sending or uncertain",
                   human={"created": render.when, "sent": render.when, "body": _preview},
                   text=["body", "error"])


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
