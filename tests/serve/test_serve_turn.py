"""WriteTurn: the server's threads take turns at the database, within the busy bound."""

from __future__ import annotations

import threading
import time

import pytest

from agentbox.errors import Busy
from agentbox.serve import WriteTurn


def test_a_turn_not_had_within_the_bound_is_busy() -> None:
    turn = WriteTurn(0.2)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with turn:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(30)
    started = time.monotonic()
    with pytest.raises(Busy), turn:
        pass
    assert time.monotonic() - started >= 0.2
    release.set()
    thread.join(30)
    with turn:  # free again once given back
        pass
