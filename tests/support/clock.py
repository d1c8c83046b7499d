"""The simulated clock: every test passes ``now`` explicitly; nothing sleeps for it."""

from __future__ import annotations

T0 = 1_000_000  # the article's simulated clock starts here
# A start that prints as a real date (2023-11-14 22:13:20 UTC), for tests that show
# calendar times or check signatures' timestamps.
T0_2023 = 1_700_000_000
TTL = 120  # the article's lease, the default lease_ttl
