"""The simulated clock: every test passes ``now`` explicitly; nothing sleeps for it. And
a clock standing for a module's own ``time``, whose sleeps take no time."""

from __future__ import annotations

T0 = 1_000_000  # the article's simulated clock starts here
# A start that prints as a real date (2023-11-14 22:13:20 UTC), for tests that show
# calendar times or check signatures' timestamps.
T0_2023 = 1_700_000_000
TTL = 120  # the article's lease, the default lease_ttl


class SleepingClock:
    """``time.monotonic`` and ``time.sleep`` for a module under test, put in place of its
    ``time``: a sleep moves the clock on at once, and is noted."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
