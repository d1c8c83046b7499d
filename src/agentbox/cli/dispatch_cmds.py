"""dispatch and outbox: sending the held messages, and looking after them.

``dispatch`` keeps stdout for data only: the merged body when there is no
sender command (so cron can pipe it on), or the JSON document with
``--json``. What happened is said on stderr.
"""


from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import command_flag, complete_delivery, duration_flag

if TYPE_CHECKING:
    from agentbox.cli.session import Session
    from agentbox.rules.outbox import Settle
    from agentbox.rules.records import Dispatch, SendOutcome, Wait
    from agentbox.store import Store

# The table; JSON objects carry these names and the message body too.
LIST_COLUMNS = ["id", "state", "urgent", "dispatch_key", "created", "sent", "body", "error"]
PREVIEW = 60  # characters of a body the table shows; `--json` has it whole


def _preview(body: str) -> str:
    """The start of a message body on one line, cut with an ellipsis."""
    flat = " ".join(body.split())
    return flat if len(flat) <= PREVIEW else flat[:PREVIEW - 1].rstrip() + "…"


def _sender_env(sess: "Session", dispatch: "Dispatch", body: bytes) -> dict[str, str]:
    """The sender's environment: ours, plus what it needs to dedupe and find the inbox.

    ``AGENTBOX_BODY_BYTES`` and ``AGENTBOX_BODY_SHA256`` describe the whole
    body on stdin: a dispatcher killed while writing it leaves the sender a
    cut-short stdin, which it can only tell from a shorter message by these.
    """
    import hashlib
    import os

    return {**os.environ, "AGENTBOX_DISPATCH_KEY": dispatch.key,
            "AGENTBOX_DISPATCH_ATTEMPT": str(dispatch.tries),
            "AGENTBOX_DISPATCH_URGENT": "1" if dispatch.urgent else "0",
            "AGENTBOX_BODY_BYTES": str(len(body)),
            "AGENTBOX_BODY_SHA256": hashlib.sha256(body).hexdigest(),
            "AGENTBOX_USER": sess.user_or_none() or "",
            "AGENTBOX_DB": sess.db_target}


class Sent(NamedTuple):
    """How a try ended: the sender's word, whether it was recorded, and when."""

    outcome: "SendOutcome"
    error: str | None
    recorded: bool
    at: int

    def fate(self, dispatch: "Dispatch") -> "tuple[Settle, int | None]":
        """What the word did to the dispatch (the rule the store applied), and when
        its key is tried again, if it is."""
        from agentbox.rules.outbox import on_settle, resend_after

        action = on_settle("sending", dispatch.mode, dispatch.tries, dispatch.tries,
                           self.outcome, dispatch.max_tries)
        again = {"unknown": dispatch.deadline,
                 "retry": resend_after(self.at, dispatch.tries)}.get(action)
        return action, again


# The dispatch's messages after each fate, for --json.
_STATE_AFTER = {"sent": "sent", "late-sent": "sent", "failed": "held", "retry": "sending",
                "unknown": "sending", "park": "uncertain"}


def _settle(store: "Store", sess: "Session", dispatch: "Dispatch", outcome: "SendOutcome",
            error: str | None) -> Sent:
    """Record the outcome in a second transaction, saying so if the database would not."""
    from agentbox.errors import Busy

    now = sess.now()
    try:
        recorded = store.settle_dispatch(dispatch.key, outcome, now, error,
                                         attempt=dispatch.tries)
    except Busy as exc:
        raise Busy(f"the send ended ({outcome}) but could not be recorded: {exc}; dispatch "
                   f"{dispatch.key} counts as not known after its claim deadline") from None
    return Sent(outcome, error, recorded, now)


def _send(sess: "Session", store: "Store", dispatch: "Dispatch", argv: list[str] | None,
          timeout: int, as_json: bool) -> Sent:
    """Deliver the claimed body and record how it went.

    With no sender, writing the body to stdout (inside the JSON document with
    ``--json``) is the delivery.
    """
    from agentbox import render

    if argv is None:
        try:
            if as_json:
                render.document(_claim_doc(dispatch, None, printed=True))
            else:
                render.data(dispatch.body)
        except OSError as exc:  # a closed pipe: the body went nowhere
            return _settle(store, sess, dispatch, "failed",
                           f"stdout closed: {exc.strerror or exc}")
        return _settle(store, sess, dispatch, "sent", None)
    from agentbox.process import CommandNotStarted, run_child

    try:
        body = dispatch.body.encode("utf-8")
        result = run_child(argv, body, _sender_env(sess, dispatch, body), timeout,
                           label="sender")
    except CommandNotStarted as exc:
        return _settle(store, sess, dispatch, "failed", str(exc))
    except BaseException:
        # Interrupted while the sender ran: it may have delivered.
        import contextlib

        with contextlib.suppress(Exception):
            store.settle_dispatch(dispatch.key, "unknown", sess.now(),
                                  "dispatcher interrupted mid-send", attempt=dispatch.tries)
        raise
    from agentbox.rules.outbox import sender_word

    outcome = sender_word(result.ok, result.returncode, result.timed_out, result.stopped)
    said = None if outcome == "sent" else f"sender {result.describe()}"
    return _settle(store, sess, dispatch, outcome, said)


def _claim_doc(dispatch: "Dispatch", sent: Sent | None, printed: bool) -> dict[str, Any]:
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


def _say_claim(dispatch: "Dispatch", sent: Sent) -> None:
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
    as_json: JsonFlag = False,
) -> None:
    """Send the held messages merged into one, at most once per gap.

    The body goes on the sender's stdin, or on stdout when no sender is set.
    Exit 0 sent, nothing to send, or the gap has not passed; 1 the sender
    failed or timed out; 75 the database stayed busy.
    """
    from agentbox import render
    from agentbox.errors import UsageError
    from agentbox.rules.records import DELIVERY_MODES, Wait

    if mode is not None and mode not in DELIVERY_MODES:
        raise UsageError(f"--mode must be one of {', '.join(DELIVERY_MODES)}, not {mode!r}")
    argv = command_flag("--via", via, command)
    sess = session(ctx)
    settings = sess.settings({"delivery": mode, "outbox_gap": duration_flag("--gap", gap),
                              "send_timeout": duration_flag("--timeout", timeout)})
    policy = settings.policy
    argv = argv or settings.sender
    store = sess.store()
    now = sess.now()
    claimed = store.claim_dispatch(now, policy.delivery, policy.outbox_gap, policy.send_timeout,
                                   policy.max_send_tries)
    if isinstance(claimed, Wait):
        if as_json:
            render.document(_wait_doc(claimed))
        else:
            _say_wait(claimed, now)
        return
    sent = _send(sess, store, claimed, argv, policy.send_timeout, as_json)
    if not as_json:
        _say_claim(claimed, sent)
    elif argv is not None:
        render.document(_claim_doc(claimed, sent, printed=False))
    raise typer.Exit(0 if sent.outcome == "sent" else 1)


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
