"""inboxes, prune, backup, restore, doctor and metrics: looking after inboxes for months."""

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.errors import Exit

if TYPE_CHECKING:
    from agentbox.cli.session import Session
    from agentbox.upkeep import Survey

AllUsersFlag = Annotated[bool, typer.Option(
    "--all-users", help="Every user's inbox under the data folder.")]
INBOX_COLUMNS = ["user", "pending", "running", "done", "dead", "size", "last activity",
                 "paused"]


def _survey_doc(found: "Survey") -> dict[str, Any]:
    from agentbox.spelling import pause_document

    v = found.vitals
    if v is None:
        return {"user": found.user, "db": found.location, "error": found.error}
    lease = v.status.lease
    return {"user": found.user, "db": found.location, "events": v.status.events,
            "outbox": v.status.outbox, "bytes": v.bytes, "last_activity": v.last_activity,
            "last_run": v.last_run, "last_prune": v.last_prune,
            "oldest_pending": v.oldest_pending,
            "lease": None if lease is None else {"holder": lease.holder,
                                                 "generation": lease.generation,
                                                 "until": lease.until},
            "paused": pause_document(v.status.paused), "error": None}


def _survey(sess: "Session") -> "list[Survey]":
    """Every user's inbox where this one's lives, and its vitals (see upkeep.survey)."""
    from agentbox.upkeep import survey

    inboxes = sess.inboxes()
    try:
        return survey(inboxes)
    finally:
        inboxes.close()


def show_inboxes(ctx: typer.Context, as_json: bool) -> None:
    """Every user's inbox with its counts, size and last activity (`status --all-users`)."""
    from agentbox import render

    docs = [_survey_doc(s) for s in _survey(session(ctx))]
    if as_json:
        render.document(docs)
        return
    for bad in (d for d in docs if d["error"] is not None):
        render.notice(f"{bad['user']}: unreadable: {bad['error']}")
    rows = [{"user": d["user"], **(d.get("events") or {}),
             "size": render.size(d.get("bytes")),
             "last activity": "unreadable" if d["error"] is not None
             else render.when(d.get("last_activity")),
             "paused": (d.get("paused") or {}).get("reason") or "-"} for d in docs]
    render.records(rows, INBOX_COLUMNS, False, title="inboxes", empty="none yet")


@app.command()
def inboxes(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every user's inbox: counts by state, held messages, size and last activity."""
    show_inboxes(ctx, as_json)


@app.command()
def prune(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Count what would go; change nothing.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete done events older than keep_done, sent messages and settled dispatches
    older than keep_sent, with their history; pruned keys still refuse redeliveries
    for dedupe_window. Dead events are never pruned by age."""
    from agentbox import render
    from agentbox.upkeep import prune as run_prune

    sess = session(ctx)
    report = run_prune(sess.store(), sess.now(), sess.settings().policy, dry_run=dry_run)
    if as_json:
        render.document(report.document())
    else:
        render.line(report.describe())


@app.command()
def backup(
    ctx: typer.Context,
    dest: Annotated[str, typer.Argument(metavar="DEST", help="The file to write.")],
    force: Annotated[bool, typer.Option("--force", help="Replace DEST if it exists.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """A consistent copy of the inbox while writers keep working; open it with --db DEST.

    DEST is written 0600 and appears whole or not at all; an existing DEST is
    refused (exit 2) unless --force.
    """
    import os

    from agentbox import render, upkeep
    from agentbox.errors import UsageError

    target = os.path.abspath(dest)
    if not force and os.path.lexists(target):
        raise UsageError(f"{dest} exists; pass --force to replace it")
    store = session(ctx).store()
    if os.path.exists(target) and os.path.samefile(target, store.location):
        raise UsageError(f"{dest} is the inbox itself")
    size = upkeep.backup(store, target, replace=force)
    if as_json:
        render.document({"db": store.location, "backup": target, "bytes": size})
    else:
        render.line(f"backed up {store.location} to {target} ({render.size(size)})")


@app.command()
def restore(
    ctx: typer.Context,
    backup_file: Annotated[str, typer.Argument(metavar="BACKUP",
                                               help="A file `agentbox backup` wrote.")],
    force: Annotated[bool, typer.Option(
        "--force", help="Restore even though the inbox holds events the backup lacks.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Replace the inbox with BACKUP; the replaced file is kept beside it.

    Refused (exit 75) while any agentbox process works on the inbox, and (exit 2)
    when the inbox holds events the backup lacks, unless --force. The restored
    inbox has no lease; new ids continue above both files' and new keys start a
    new epoch.
    """
    from agentbox import render, upkeep
    from agentbox.errors import UsageError
    from agentbox.location import is_url

    sess = session(ctx)
    store = sess.store()
    location = store.location
    store.close()  # restore must hold the inbox alone, this command included
    if is_url(location):
        raise UsageError("restore replaces an SQLite inbox file; a PostgreSQL database is "
                         "restored with PostgreSQL's own tools (see docs/postgres.md)")
    report = upkeep.restore(location, backup_file, sess.now(), force=force)
    if as_json:
        render.document(report.document())
    else:
        render.line(report.describe())


@app.command()
def doctor(
    ctx: typer.Context,
    max_pending_age: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--max-pending-age", metavar="DURATION",
        help="How long the oldest pending event may wait (default 1h).",
        show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Check the inbox: integrity, schema, permissions, WAL size, lease, events stuck
    running, uncertain dispatches, the oldest pending event; and config.toml. Exit 0
    when all is well, 1 otherwise."""
    from agentbox import config, paths, render
    from agentbox.cli.options import duration_flag
    from agentbox.errors import AgentboxError
    from agentbox.rules.health import PENDING_AGE_LIMIT, Check
    from agentbox.upkeep import diagnose

    limit = duration_flag("--max-pending-age", max_pending_age) or PENDING_AGE_LIMIT
    sess = session(ctx)
    try:
        store = sess.store()
    except AgentboxError as exc:  # a file that cannot even be opened is the finding
        checks = [Check("open", False, str(exc))]
    else:
        checks = [Check("open", True, store.location), *diagnose(store, sess.now(), limit)]
    # Other commands warn about an unknown key and go on: here it is a finding.
    problems = config.findings(paths.config_path())
    checks.append(Check("config", not problems, "; ".join(problems) or "no unknown key, "
                        "no bad value"))
    healthy = all(c.ok for c in checks)
    if as_json:
        render.document({"user": sess.user_or_none(), "db": sess.db_target, "ok": healthy,
                         "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail}
                                    for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            render.line(f"{'ok  ' if c.ok else 'FAIL'}  {c.name.ljust(width)}  {c.detail}")
    raise typer.Exit(Exit.OK if healthy else Exit.FAILURE)


@app.command()
def metrics(
    ctx: typer.Context,
    all_users: AllUsersFlag = False,
    output: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output", "-o", metavar="FILE", help="Write to FILE atomically (for node_exporter's "
        "textfile collector) instead of stdout.", show_default=False)] = None,
) -> None:
    """Prometheus text: events and messages by state, oldest pending age, lease
    generation, last run, next timer and size, labelled by user."""
    from pathlib import Path

    from agentbox import paths, render
    from agentbox.metrics import exposition

    sess = session(ctx)
    if all_users:
        found = _survey(sess)
        for bad in (s for s in found if s.vitals is None):
            render.notice(f"{bad.user}: left out of the metrics: {bad.error}")
        readings = [(s.user, s.vitals) for s in found if s.vitals is not None]
        failed = len(found) - len(readings)
    else:
        readings, failed = [(sess.user_or_none() or "", sess.store().vitals())], 0
    text = exposition(readings, sess.now())
    if output is None:
        render.data(text.rstrip("\n"))
    else:
        paths.write_atomically(Path(output), text.encode("utf-8"), 0o644)
    raise typer.Exit(Exit.FAILURE if failed else Exit.OK)
