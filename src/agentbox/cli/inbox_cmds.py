"""ingest, status, dead and replay: the inbox side of the CLI."""

import contextlib
import os
import sys
from typing import IO, TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.errors import Exit

if TYPE_CHECKING:
    from collections.abc import Iterator

    from agentbox.jsonl import Report
    from agentbox.rules.records import IngestResult
    from agentbox.signatures import Check

_OUTCOME_EXIT = {"stored": Exit.OK, "duplicate": Exit.OK, "conflict": Exit.NOT_AS_ASKED}


@contextlib.contextmanager
def _open_source(name: str) -> "Iterator[IO[bytes]]":
    """A file opened for reading bytes, or stdin for '-'."""
    from agentbox.errors import BadInput

    if name == "-":
        yield sys.stdin.buffer
        return
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise BadInput(f"cannot read {name}: {exc.strerror or exc}") from None
    with fh:
        yield fh


def _signature_check(signature: str | None, secret_env: str | None, now: int) -> "Check | None":
    """The signature check asked for, or None; made before any input is read.

    A usage mistake, or a signature that is malformed, costs nothing.
    """
    from agentbox.errors import UsageError

    if signature is None and secret_env is None:
        return None
    if signature is None or secret_env is None:
        raise UsageError("--signature and --secret-env go together")
    secret = os.environ.get(secret_env)
    if not secret:
        raise UsageError(f"environment variable {secret_env} (the signing secret) is "
                         + ("not set" if secret is None else "empty"))
    from agentbox.signatures import Check

    # the variable's own bytes, whatever their encoding
    return Check(signature, os.fsencode(secret), now)


def _stdin_is_waiting() -> bool:
    """Whether stdin holds bytes right now; looked at, never read.

    A pipe or socket with bytes buffered, or a file with bytes left past its
    position, is waiting. A terminal, /dev/null, an empty or closed pipe is not.
    """
    import stat

    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            return False
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.lseek(fd, 0, os.SEEK_CUR) < os.fstat(fd).st_size
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return False
        import array
        import fcntl
        import termios

        waiting = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, waiting)
        return waiting[0] > 0
    except (AttributeError, ValueError, OSError):  # no stdin, or not a real file
        return False


def _result_doc(result: "IngestResult") -> dict[str, Any]:
    return {"outcome": result.outcome, "id": result.id, "source": result.source,
            "source_id": result.source_id}


def _describe(result: "IngestResult") -> str:
    key = f"{result.source}/{result.source_id}"
    if result.outcome == "stored":
        return f"stored {key} as event {result.id}"
    if result.outcome == "duplicate":
        return f"duplicate: {key} is already event {result.id}"
    return f"conflict: {key} is event {result.id} with a different payload; the first stands"


@app.command()
def ingest(
    ctx: typer.Context,
    source: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        metavar="SOURCE", help="Where the event comes from (github, stripe, chat, …).",
        show_default=False)] = None,
    source_id: Annotated[Optional[str], typer.Argument(  # noqa: UP045
        metavar="SOURCE_ID", help="The source's own id for it (a delivery id).",
        show_default=False)] = None,
    payload: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--payload", "-p", metavar="JSON",
        help="The event as a JSON object (default {}; stdin is never read for it).",
        show_default=False)] = None,
    payload_file: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--payload-file", "-f", metavar="FILE",
        help="Read the JSON object from FILE, or stdin for '-'.", show_default=False)] = None,
    jsonl: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--jsonl", metavar="FILE",
        help="Ingest many: one {\"source\",\"source_id\",\"payload\"} per line, "
        "from FILE or stdin for '-'.", show_default=False)] = None,
    signature: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--signature", metavar="SIG", help="Check this signature of the raw body first: "
        "'sha256=<hex>' (GitHub) or 't=…,v1=…' (Stripe).", show_default=False)] = None,
    secret_env: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--secret-env", metavar="VAR", help="Environment variable holding the signing secret.",
        show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Store an event once; a repeat delivery is a duplicate, a changed one a conflict.

    The payload comes from --payload or --payload-file (- for stdin); with
    neither it is {}. stdin is read only when asked for, so a `while read`
    loop keeps its input; but a body piped in without --payload-file would
    be lost, so when stdin holds data and no payload was named, ingest
    refuses (exit 2): pass --payload-file - to ingest it, or --payload '{}'
    to leave stdin alone.

    Exit 0 stored or duplicate, 3 conflict (the first payload stands), 65 bad
    input, 77 signature mismatch. With --jsonl: 65 if any line was bad, else 3
    if any was a conflict, else 0.
    """
    from agentbox.errors import UsageError

    if jsonl is not None:
        if source is not None or payload is not None or payload_file is not None:
            raise UsageError("--jsonl takes no SOURCE, SOURCE_ID, --payload or --payload-file")
    elif source is None or source_id is None:
        raise UsageError("ingest needs SOURCE and SOURCE_ID (or --jsonl FILE)")
    elif payload is not None and payload_file is not None:
        raise UsageError("give --payload or --payload-file, not both")
    elif payload is None and payload_file is None and _stdin_is_waiting():
        raise UsageError("stdin holds data but no payload was named: pass --payload-file - "
                         "to ingest it, or --payload '{}' to store {} and leave stdin alone")
    sess = session(ctx)
    now = sess.now()
    check = _signature_check(signature, secret_env, now)
    # The settings name the user, so a bad user name is refused here, before
    # any input is read or any file is made.
    max_payload = sess.settings().policy.max_payload
    from agentbox import delivery, render

    if jsonl is not None:
        with _open_source(jsonl) as stream:
            report = delivery.accept_lines(sess.store, stream, max_payload=max_payload,
                                           now=now, check=check)
        _report_lines(report, as_json)
        return
    assert source is not None and source_id is not None
    if payload is not None:
        body = payload.encode("utf-8", "surrogateescape")
    elif payload_file is not None:
        with _open_source(payload_file) as stream:
            body = delivery.read_bounded(stream, max_payload)
    else:
        body = b"{}"
    result = delivery.accept(sess.store, source, source_id, body, max_payload=max_payload,
                             now=now, check=check)
    if as_json:
        render.document(_result_doc(result))
    else:
        render.line(_describe(result))
    raise typer.Exit(_OUTCOME_EXIT[result.outcome])


def _report_lines(report: "Report", as_json: bool) -> None:
    from agentbox import render
    if as_json:
        render.document(report.document())
    else:
        render.lines(entry.describe() for entry in report.entries)
        render.notice(report.summary())
    raise typer.Exit(Exit.DATA if report.bad else Exit.NOT_AS_ASKED if report.conflicts
                     else Exit.OK)


@app.command()
def status(ctx: typer.Context, as_json: JsonFlag = False, all_users: Annotated[bool, typer.Option(
        "--all-users", help="Every user's inbox, as `agentbox inboxes` lists them.")] = False,
           ) -> None:
    """Counts by state, the lease, the next timer and the held messages."""
    from agentbox import render

    if all_users:
        from agentbox.cli.upkeep_cmds import show_inboxes

        show_inboxes(ctx, as_json)
        return
    sess = session(ctx)
    store = sess.store()
    state = store.status()
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
    ], title="agentbox status")


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
