"""approve request | answer | list: deferred approvals that expire (rule 6)."""


from typing import Annotated

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.options import checked_flag, complete_answer, duration_flag
from agentbox.errors import Exit

approve_app = typer.Typer(help="Approvals: a request, then one answer or its expiry.",
                          no_args_is_help=True)
app.add_typer(approve_app, name="approve")

RequestId = Annotated[str, typer.Argument(metavar="ID", help="The approval's id.")]


@approve_app.command("request")
def approve_request(
    ctx: typer.Context,
    request_id: RequestId,
    expires_in: Annotated[str, typer.Option(
        "--expires-in", metavar="DURATION",
        help="How long the answer may take (15m, 4h, 1d); then it is "
        "expired.", show_default=False)],
    action: Annotated[str, typer.Option(
        "--action", metavar="TEXT", help="What is being approved, in words.", show_default=False)],
    as_json: JsonFlag = False,
) -> None:
    """Ask for an approval; its answer, or its expiry, comes back as an `approval` event.

    Asking again for the same action changes nothing (exit 0); the same id with
    another action is refused, the first request stands (exit 3).
    """
    from agentbox import render
    from agentbox.errors import UsageError

    seconds = duration_flag("--expires-in", expires_in)
    assert seconds is not None
    if not action.strip():
        raise UsageError("--action cannot be empty")
    sess = session(ctx)
    now = sess.now()
    store = sess.store()
    added = store.request_approval(request_id, now, seconds, action)
    current = next(a for a in store.approvals(now) if a.id == request_id)
    outcome = ("requested" if added else "unchanged" if current.action == action
               else "conflict")
    if as_json:
        render.document({"outcome": outcome, "id": request_id, "action": current.action,
                         "expires_at": current.expires_at, "status": current.outcome})
    elif outcome == "requested":
        render.line(f"requested approval {request_id}: {action} "
                    f"(expires {render.when(current.expires_at)})")
    elif outcome == "unchanged":
        render.line(f"approval {request_id} was already requested; it is "
                    f"{current.outcome} (expires {render.when(current.expires_at)})")
    else:
        render.line(f"approval {request_id} exists for another action "
                    f"({current.action!r}); the first request stands")
    raise typer.Exit(Exit.NOT_AS_ASKED if outcome == "conflict" else Exit.OK)


@approve_app.command("answer")
def approve_answer(
    ctx: typer.Context,
    request_id: RequestId,
    reply: Annotated[str, typer.Argument(metavar="yes|no", help="The answer.",
                                         autocompletion=complete_answer)],
    as_json: JsonFlag = False,
) -> None:
    """Answer a request. Prints the outcome that stands: exit 0 when it is yours, 3 when
    another stands (expired, an earlier answer, or unknown for a request never made)."""
    from agentbox import render
    from agentbox.rules.approvals import check_reply

    checked_flag("the answer", reply, check_reply)
    sess = session(ctx)
    standing = sess.store().answer_approval(request_id, reply, sess.now())
    stands = standing == reply
    if as_json:
        render.document({"id": request_id, "answer": reply, "outcome": standing,
                         "stands": stands})
    elif stands:
        render.line(f"{request_id}: {standing}")
    elif standing == "expired":
        render.line(f"{request_id}: expired; the deadline passed before your {reply}")
    elif standing == "unknown":
        render.line(f"{request_id}: unknown; no such approval was requested")
    else:
        render.line(f"{request_id}: {standing}; an earlier answer stands, your {reply} "
                    "was not recorded")
    raise typer.Exit(Exit.OK if stands else Exit.NOT_AS_ASKED)


@approve_app.command("list")
def approve_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every request, its deadline and the outcome that stands (pending until one does).

    With `public_url` set, each pending request shows its link (JSON: "url", null
    for one no longer pending and when public_url is unset)."""

    from agentbox import render
    from agentbox.rules.links import url

    sess = session(ctx)
    store = sess.store()
    public_url = sess.settings().public_url
    user = sess.user_or_none() or ""
    rows = []
    for approval in store.approvals(sess.now()):
        row = approval._asdict()
        row["url"] = (url(public_url, store.approval_token(user, approval))
                      if public_url is not None and approval.outcome == "pending" else None)
        rows.append(row)
    columns = ["id", "action", "outcome", "requested_at", "expires_at", "answered_at"]
    render.records(rows, [*columns, "url"] if public_url is not None else columns, as_json,
                   title="approvals", empty="no approvals",
                   human={"requested_at": render.when, "expires_at": render.when,
                          "answered_at": render.when}, text=["action", "url"])


@approve_app.command("rotate-links")
def approve_rotate_links(ctx: typer.Context) -> None:
    """Sign approval links with a new secret: every link handed out before stops working
    (404); `approve list` shows the new ones."""
    from agentbox import render

    sess = session(ctx)
    sess.store().rotate_links(sess.now())
    render.line("approval links rotated: every earlier link is refused")
