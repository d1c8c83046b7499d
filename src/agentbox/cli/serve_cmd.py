"""serve: receive webhooks over HTTP into the selected user's inbox."""


from typing import Annotated, Optional

import typer

from agentbox.cli.app import app, session
from agentbox.cli.options import duration_flag, listen_flag

DEFAULT_LISTEN = "127.0.0.1:8787"
DEFAULT_BUSY_TIMEOUT = 5  # seconds: well inside the 10 s a webhook sender typically waits
DEFAULT_REQUEST_TIMEOUT = 10


@app.command()
def serve(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT",
        help="Where to listen ([::1]:PORT for IPv6; port 0 picks a free one).")] = DEFAULT_LISTEN,
    threads: Annotated[int, typer.Option(
        "--threads", min=1, max=256, help="Requests answered at once.")] = 16,
    busy_timeout: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--busy-timeout", metavar="DURATION",
        help="How long a delivery waits for the database before a 503 (default 5s).",
        show_default=False)] = None,
    request_timeout: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--request-timeout", metavar="DURATION",
        help="How long a client has to send a whole request, head and body, from its "
        "first byte, however it trickles (default 10s).", show_default=False)] = None,
    access_log: Annotated[bool, typer.Option(
        "--access-log", help="Log one line per request on stderr (method, path, status, "
        "bytes, time).")] = False,
) -> None:
    """Receive webhooks over HTTP: POST /hooks/SOURCE stores one delivery, once.

    The delivery id comes from a header (default Idempotency-Key) or a
    field of the JSON body, as the source's table says; set one with
    `agentbox config set sources.NAME.KEY VALUE`, KEY one of preset
    (github, stripe), id_header, id_field, secret_env, signature,
    signature_header, tolerance. Each answer comes after the commit: 200
    stored or duplicate, 409 conflict, 400 bad JSON or no id, 401 bad
    signature, 413 too large, 503 busy (Retry-After). GET /healthz answers
    200. GET /a/TOKEN is an approval link's page (Yes / No), see `approve
    list` and the public_url setting. Only errors are logged unless
    --access-log. SIGTERM or Ctrl-C stops accepting, finishes the requests
    under way and exits 0.
    """
    import os

    from agentbox import config, paths, sources
    from agentbox.cli.listening import listen as listen_on
    from agentbox.cli.listening import logger
    from agentbox.errors import UsageError
    from agentbox.serve import WebhookApp

    address = listen_flag("--listen", listen)
    wait = duration_flag("--busy-timeout", busy_timeout) or DEFAULT_BUSY_TIMEOUT
    deadline = duration_flag("--request-timeout", request_timeout) or DEFAULT_REQUEST_TIMEOUT
    sess = session(ctx)
    max_payload = sess.settings().policy.max_payload
    path = paths.config_path()
    configured = sources.configured(config.load(path), path, sess.user)
    secrets = {}
    for name, source in configured.items():
        if source.secret_env is not None:
            secret = os.environ.get(source.secret_env)
            if not secret:
                raise UsageError(f"source {name}: environment variable {source.secret_env} "
                                 "(its signing secret) is " + ("not set" if secret is None
                                                                else "empty"))
            secrets[name] = os.fsencode(secret)
    open_store = sess.store_factory(busy_timeout=wait)
    # The inbox opens (made, migrated) before anything is accepted, and stays open while
    # the server runs: a restore sees the server at work on it, even while idle.
    keeper = open_store()
    log = logger()
    web = WebhookApp(open_store, configured, secrets, max_payload, sess.now,
                     busy_timeout=wait, log=log, user=sess.user_or_none() or "",
                     zone=sess.zone())
    who = sess.user_or_none() or sess.db_target
    try:
        listen_on(address, listen, web, web.close, log,
                  lambda url: f"serving {who} on {url} "
                  "(POST /hooks/SOURCE, GET /healthz, approval links /a/TOKEN)",
                  max_body=max_payload, threads=threads, request_timeout=deadline,
                  access_log=log if access_log else None)
    finally:
        keeper.close()
