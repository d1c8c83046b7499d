"""events: any event of the inbox, listed with filters or shown with its story."""

from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session

if TYPE_CHECKING:
    from agentbox.ledger.store import Store
    from agentbox.rules.records import Event

LIST_COLUMNS = ["id", "created_at", "status", "attempts", "source", "source_id"]
DEFAULT_LIMIT = 100


def event_doc(event: "Event") -> dict[str, Any]:
    """An event as every listing and `show` prints it (JSON names)."""
    from agentbox.jsonutil import stored_value

    return {"id": event.id, "source": event.source, "source_id": event.source_id,
            "status": event.status, "attempts": event.attempts, "error": event.error,
            "payload": stored_value(event.payload), "generation": event.claim_gen,
            "created_at": event.created_at, "updated_at": event.updated_at}


def show_event(store: "Store", event_id: int, as_json: bool) -> None:
    """One event: payload, error and whole history (`events show`, `dead show`).

    An id with no event (never stored, or pruned) is bad input (65).
    """
    import json

    from agentbox import render
    from agentbox.errors import BadInput
    from agentbox.jsonutil import stored_value

    event = store.event(event_id)
    if event is None:
        raise BadInput(f"no event with id {event_id}")
    story = [{"at": h.at, "action": h.action, "generation": h.generation, "detail": h.detail}
             for h in store.story(event_id)]
    if as_json:
        render.document({**event_doc(event), "history": story})
        return
    render.pairs([("id", event.id), ("key", f"{event.source}/{event.source_id}"),
                  ("status", event.status), ("attempts", event.attempts),
                  ("error", event.error),
                  ("payload", json.dumps(stored_value(event.payload), indent=2,
                                         ensure_ascii=False))],
                 title=f"event {event.id}")
    render.records(story, ["at", "action", "generation", "detail"], False, title="history",
                   human={"at": render.when}, text=["detail"])


events_app = typer.Typer(help="Every event, whatever its state.", no_args_is_help=False,
                         invoke_without_command=True)
app.add_typer(events_app, name="events")

StateFlag = Annotated[Optional[list[str]], typer.Option(  # noqa: UP045
    "--state", "-s", metavar="STATE", help="Only events in this state (pending, running, done, "
    "dead); repeat for several.", show_default=False)]
SourceFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--source", metavar="SOURCE", help="Only events from this source.", show_default=False)]
SinceFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--since", metavar="T", help="Only events that arrived at or after T: a time (Unix "
    "seconds, ISO 8601) or a duration ago (2h, 7d).", show_default=False)]
UntilFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--until", metavar="T", help="Only events that arrived before T.", show_default=False)]
BeforeFlag = Annotated[Optional[int], typer.Option(  # noqa: UP045
    "--before", metavar="ID", min=1, help="Only events with a lower id: page back from the "
    "oldest id shown.", show_default=False)]
LimitFlag = Annotated[int, typer.Option(
    "--limit", "-n", min=1, help="Show at most the newest N that match.")]


def _list(ctx: typer.Context, states: list[str] | None, source: str | None,
          since: str | None, until: str | None, before: int | None, limit: int,
          as_json: bool) -> None:
    from agentbox import render
    from agentbox.cli.options import since_flag
    from agentbox.errors import UsageError
    from agentbox.rules.records import EVENT_STATES

    unknown = [s for s in states or [] if s not in EVENT_STATES]
    if unknown:
        raise UsageError(f"--state: {unknown[0]!r} is not a state "
                         f"(one of {', '.join(EVENT_STATES)})")
    sess = session(ctx)
    now = sess.now()
    found = sess.store().events(states or (), source,
                                since_flag("--since", since, now, sess.zone),
                                since_flag("--until", until, now, sess.zone), before, limit)
    render.records([event_doc(e) for e in found], LIST_COLUMNS, as_json, title="events",
                   empty="none", human={"created_at": render.when})


@events_app.callback()
def events(ctx: typer.Context, states: StateFlag = None, source: SourceFlag = None,
           since: SinceFlag = None, until: UntilFlag = None, before: BeforeFlag = None,
           limit: LimitFlag = DEFAULT_LIMIT, as_json: JsonFlag = False) -> None:
    """List events (same as `events list`)."""
    if ctx.invoked_subcommand is None:
        _list(ctx, states, source, since, until, before, limit, as_json)


@events_app.command("list")
def events_list(ctx: typer.Context, states: StateFlag = None, source: SourceFlag = None,
                since: SinceFlag = None, until: UntilFlag = None, before: BeforeFlag = None,
                limit: LimitFlag = DEFAULT_LIMIT, as_json: JsonFlag = False) -> None:
    """The newest events that match, oldest first (ids only grow: page with --before)."""
    _list(ctx, states, source, since, until, before, limit, as_json)


@events_app.command("show")
def events_show(ctx: typer.Context, event_id: Annotated[int, typer.Argument(
        metavar="ID", help="The event id.")], as_json: JsonFlag = False) -> None:
    """Any event's payload, error and whole history (an unknown id exits 65)."""
    show_event(session(ctx).store(), event_id, as_json)
