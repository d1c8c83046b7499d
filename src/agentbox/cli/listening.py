"""What the long-running commands share: a collector that leaves their start-up alone,
and for `serve` and `console`, one log line at a time and serving until a signal."""

from collections.abc import Callable
from typing import Any


def long_lived() -> None:
    """Keep the cyclic collector's full passes off what the process made while starting.

    By the time a watcher or a server starts its loop it has made nearly everything
    it keeps for its life: modules, settings, templates, connections, some 40,000
    objects. A full pass of the collector walks them all (8 ms or more on a small
    machine) whenever enough new objects have piled up, and so lands inside a run
    or a request: the tail of the latency from an event to its handler. Start-up's
    garbage is collected first, then the rest is frozen (:func:`gc.freeze`): later
    passes look only at what the loop makes, which is collected as before.
    """
    import gc

    gc.collect()
    gc.freeze()


def logger() -> Callable[[str], None]:
    """A notice writer the server's threads may share: one whole line at a time."""
    import threading

    from agentbox import render

    lock = threading.Lock()

    def log(message: str) -> None:
        with lock:
            render.notice(message)

    return log


def listen(address: tuple[str, int], listen_text: str, app: Any, close: Callable[[], None],
           log: Callable[[str], None], banner: Callable[[str], str],
           **options: Any) -> None:
    """Serve ``app`` on ``address`` until SIGTERM or SIGINT, then ``close`` it.

    ``banner`` turns the URL served (its port known once bound) into the line
    logged when listening begins; ``options`` go to the server.
    """
    import signal

    from agentbox.errors import AgentboxError
    from agentbox.httpserver import Server

    try:
        server = Server(address, app, log=log, **options)
    except OSError as exc:
        raise AgentboxError(f"cannot listen on {listen_text}: {exc.strerror or exc}") from None

    def stop(signum: int, _frame: object) -> None:
        # Logged by the server's loop, not here: the signal may come while that
        # thread, the one running this handler, is inside log().
        server.stop(f"stopping on {signal.Signals(signum).name}: finishing requests under way")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    host, port = server.address
    shown = f"[{host}]" if ":" in host else host
    log(banner(f"http://{shown}:{port}/"))
    long_lived()
    try:
        server.serve()
    finally:
        close()
    log("stopped")
