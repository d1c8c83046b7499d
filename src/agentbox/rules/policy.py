"""The knobs of the rules, with their defaults, in one place.

Flags override config, config overrides these defaults; the store only ever
sees a finished :class:`Policy`.
"""

from typing import NamedTuple

from agentbox.jsonutil import DEFAULT_MAX_PAYLOAD

DEFAULT_MAX_SEND_TRIES = 5
DAY = 86400


class Policy(NamedTuple):
    lease_ttl: int = 120          # seconds a worker owns the inbox without renewing
    max_attempts: int = 3         # claims before an event is parked as dead
    retry_backoff: int = 0        # base seconds of exponential retry backoff; 0 = off
    backoff_cap: int = 3600       # the longest a retry is ever held back
    max_batch: int = 100          # events handed to one run
    outbox_gap: int = 3600        # at most one send per gap (urgent bypasses)
    max_payload: int = DEFAULT_MAX_PAYLOAD
    handler_timeout: int = 600    # seconds before a handler is stopped
    send_timeout: int = 60        # seconds before a sender is stopped
    delivery: str = "at-least-once"
    catch_up_limit: int = 100     # `each` timers: individual events before the rest coalesce
    max_send_tries: int = DEFAULT_MAX_SEND_TRIES  # tries of one dispatch key, then uncertain
    keep_done: int = 30 * DAY     # prune done events older than this
    keep_sent: int = 30 * DAY     # prune sent messages and settled dispatches older than this
    dedupe_window: int = 90 * DAY  # a pruned event's key is remembered this long after it came
    auto_prune: bool = True       # `run` prunes at most once a day
    max_state: int = 1024 * 1024  # bytes of the agent's state, canonical JSON
    keep_state_versions: int = 20  # versions of the state `state history` keeps
    max_step_output: int = 1024 * 1024  # bytes of a done step's stdout kept as its result
    step_mode: str = "at-least-once"  # a step that died inside: run again, or park uncertain
    breaker_runs: int = 5         # failed runs in a row (over 2+ events) that pause the inbox
    breaker_cooldown: int = 600   # seconds a tripped breaker waits before its probe run
    budget_tokens_per_day: int | None = None  # a local day's tokens that pause the inbox
    budget_cost_per_day: float | None = None  # a local day's cost that pauses the inbox

    def backoff(self, attempts: int) -> int:
        """Seconds a row waits before its next attempt, after ``attempts`` tries."""
        if self.retry_backoff <= 0 or attempts <= 0:
            return 0
        return int(min(self.retry_backoff * 2 ** min(attempts - 1, 32), self.backoff_cap))
