"""console: a browser console over every inbox of the data folder or database."""


from typing import Annotated

import typer

from agentbox.cli.app import app, session
from agentbox.cli.options import listen_flag
from agentbox.console import DEFAULT_LISTEN


@app.command()
def console(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Where to listen ([::1]:PORT for IPv6; port 0 picks a free one). Any address "
        "but loopback needs the console_token setting.")] = DEFAULT_LISTEN,
    threads: Annotated[int, typer.Option(
        "--threads", min=1, max=64, help="Requests answered at once.")] = 4,
    access_log: Annotated[bool, typer.Option(
        "--access-log", help="Log one line per request on stderr.")] = False,
) -> None:
    """Serve a browser console over every inbox: counts, lease, events and their
    history, dead events (Replay), uncertain dispatches (Resolve), timers and pending
    approvals (Yes / No).

    Every inbox of the data folder, or of the PostgreSQL database named by --db,
    $AGENTBOX_DB or the database setting. On loopback (the default) it needs no
    login; on any other address it refuses to start (exit 2) unless console_token
    is set, and then every page asks for it (Authorization: Bearer TOKEN, or the
    login form's cookie). SIGTERM or Ctrl-C stops it.
    """
    from agentbox.cli.listening import listen as listen_on
    from agentbox.cli.listening import logger
    from agentbox.console import ConsoleApp, is_loopback
    from agentbox.errors import UsageError
    from agentbox.location import locate_inboxes, open_inboxes

    address = listen_flag("--listen", listen)
    sess = session(ctx)
    settings = sess.settings()
    token = settings.console_token
    if token is None and not is_loopback(address[0]):
        raise UsageError(f"console on {listen}, an address other than loopback, needs the "
                         "console_token setting (`agentbox config set console_token "
                         "SECRET`, 16 characters or more)")
    target = locate_inboxes(sess.db_flag)
    first = open_inboxes(target)  # a bad location stops it before anything listens
    where = first.location  # a URL without its password
    first.close()
    log = logger()
    web = ConsoleApp(lambda: open_inboxes(target), sess.now, sess.zone(), token, log)
    listen_on(address, listen, web, web.close, log,
              lambda url: f"console for {where} on {url}"
              + (" (console_token required)" if token is not None else ""),
              max_body=64 * 1024, threads=threads, access_log=log if access_log else None)
