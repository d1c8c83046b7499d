"""What `doctor` says of each reading: the verdict and the words, the same on every backend."""

from __future__ import annotations

import stat

from agentbox.rules import health
from agentbox.rules.health import Check
from agentbox.rules.records import Lease

HELD = Lease("box:1:ab", 3, 1000)  # held until 1000 inclusive
WHO = "box:1:ab, generation 3"


def test_the_lease() -> None:
    assert health.lease(None, 900, None) == Check("lease", True, "never taken")
    assert health.lease(HELD, 1001, False) == Check("lease", True,
                                                    f"free (last held by {WHO})")
    released = HELD._replace(released=True)
    assert health.lease(released, 900, False) == Check("lease", True,
                                                       f"free (last held by {WHO})")
    assert health.lease(HELD, 1000, None) == Check("lease", True, f"held by {WHO} for 1s")
    assert health.lease(HELD, 940, True) == Check("lease", True, f"held by {WHO} for 1m1s")
    assert health.lease(HELD, 1000, False) == Check(
        "lease", False, f"stale: held by {WHO}, whose process is gone; the next run waits "
                        "until it expires in 1s")


def test_events_running_past_their_lease() -> None:
    assert health.running([], HELD, 900) == Check("running", True, "none running")
    assert health.running([(5, 3), (6, 3)], HELD, 1000) == Check(
        "running", True, "2 running under the live lease")
    stuck = Check("running", False,
                  "1 event(s) stuck running past their lease (5); the next run retries them")
    assert health.running([(5, 2), (6, 3)], HELD, 900) == stuck  # an older generation
    assert health.running([(5, 3)], HELD, 1001) == stuck  # the lease expired
    assert health.running([(5, 3)], HELD._replace(released=True), 900) == stuck
    many = health.running([(i, None) for i in range(12, 0, -1)], None, 900)
    assert many == Check("running", False, "12 event(s) stuck running past their lease "
                                           "(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …); the next run "
                                           "retries them")
    ten = health.running([(i, None) for i in range(1, 11)], None, 900)
    assert "(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)" in ten.detail
    eleven = health.running([(i, None) for i in range(1, 12)], None, 900)
    assert "(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)" in eleven.detail


def test_uncertain_dispatches() -> None:
    assert health.uncertain(0) == Check("uncertain", True, "no uncertain dispatch")
    assert health.uncertain(2) == Check(
        "uncertain", False, "2 message(s) in uncertain dispatches: check the channel, then "
                            "`agentbox outbox resolve KEY`")


def test_the_oldest_pending_event() -> None:
    assert health.pending(None, 900) == Check("pending", True, "nothing pending")
    zero = Check("pending", True, "oldest pending event is 0s old")
    assert health.pending(1000, 1000) == zero
    assert health.pending(1000, 900) == zero  # a clock behind the arrival
    assert health.pending(1000, 1000 + 3600) == Check("pending", True,
                                                      "oldest pending event is 1h old")
    assert health.pending(1000, 1000 + 3601) == Check(
        "pending", False, "oldest pending event is 1h1s old (limit 1h): are runs happening?")
    assert not health.pending(0, 61, limit=60).ok and health.pending(0, 60, limit=60).ok


def test_the_journal() -> None:
    limit = health.WAL_LIMIT
    assert limit == 64 * 1024 * 1024
    assert health.journal(limit) == Check("wal", True, "write-ahead log is 67,108,864 bytes")
    assert health.journal(limit + 1) == Check(
        "wal", False, "write-ahead log is 67,108,865 bytes (limit 67,108,864): a long reader "
                      "is holding back checkpoints")
    assert not health.journal(10, limit=9).ok and health.journal(9, limit=9).ok


def test_permissions() -> None:
    assert health.private([]) == Check("permissions", True, "no file yet")
    private = [("/f", stat.S_IFREG | 0o600), ("/d", stat.S_IFDIR | 0o700),
               ("/r", stat.S_IFDIR | 0o755), ("/tmp", stat.S_IFDIR | 0o1777)]
    assert health.private(private) == Check("permissions", True,
                                            "files 0600, folder not writable by others")
    assert health.private([("/f", stat.S_IFREG | 0o640), ("/d", stat.S_IFDIR | 0o770),
                           ("/g", stat.S_IFREG | 0o604), ("/o", stat.S_IFDIR | 0o702)]) == Check(
        "permissions", False, "/f is open to others (mode 0640; want 0600); folder /d is "
                              "writable by others (mode 0770); /g is open to others (mode "
                              "0604; want 0600); folder /o is writable by others (mode 0702)")
