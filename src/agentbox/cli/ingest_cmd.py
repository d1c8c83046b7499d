"""ingest: the command a webhook receiver starts once per delivery, in a module of its
own so that starting it loads nothing the other inbox commands need."""

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, open_source, session
from agentbox.errors import Exit

if TYPE_CHECKING:

    from agentbox.jsonl import IngestReport
    from agentbox.rules.records import IngestResult
    from agentbox.signatures import Check

_OUTCOME_EXIT = {"stored": Exit.OK, "duplicate": Exit.OK, "conflict": Exit.NOT_AS_ASKED}


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
        help="The event as a JSON object (default {}; for stdin use --payload-file -).",
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
    elif payload == "-":  # the spelling of stdin elsewhere; here it would be bad JSON
        raise UsageError("--payload takes the JSON itself; to read it from stdin, "
                         "use --payload-file -")
    elif payload is None and payload_file is None and _stdin_is_waiting():
        raise UsageError("stdin holds data but no payload was named: pass --payload-file - "
                         "to ingest it, or --payload '{}' to store {} and leave stdin alone")
    sess = session(ctx)
    now = sess.now()
    check = _signature_check(signature, secret_env, now)
    # The settings name the user, so a bad user name is refused here, before
    # any input is read or any file is made.
    # Only the key ingest reads: a bad setting of another command does not stop a webhook.
    max_payload: int = sess.settings().value("max_payload")
    from agentbox import delivery, render

    if jsonl is not None:
        with open_source(jsonl) as stream:
            report = delivery.accept_lines(sess.store, stream, max_payload=max_payload,
                                           now=now, check=check)
        _report_lines(report, as_json)
        return
    assert source is not None and source_id is not None
    if payload is not None:
        body = payload.encode("utf-8", "surrogateescape")
    elif payload_file is not None:
        with open_source(payload_file) as stream:
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


def _report_lines(report: "IngestReport", as_json: bool) -> None:
    from agentbox import render
    if as_json:
        render.document(report.document())
    else:
        render.lines(entry.describe() for entry in report.entries)
        render.notice(report.summary())
    raise typer.Exit(Exit.DATA if report.bad else Exit.NOT_AS_ASKED if report.conflicts
                     else Exit.OK)
