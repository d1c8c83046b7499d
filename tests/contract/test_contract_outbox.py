"""Store contract: the paced outbox — claim, settle, resend, park and resolve."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput, NotAsAsked
from agentbox.ledger.store import Store
from agentbox.rules.outbox import RESEND_BACKOFF, Dispatch, Wait
from agentbox.rules.records import OUTBOX_STATES, Entry
from agentbox.rules.retention import Cutoffs
from support.clock import T0
from support.store import outbox_states, say

GAP = 3600
TIMEOUT = 60


def dispatch(store: Store, now: int, mode: str = "at-least-once", max_tries: int = 5
             ) -> Dispatch:
    found = store.claim_dispatch(now, mode, GAP, TIMEOUT, max_tries=max_tries)
    assert isinstance(found, Dispatch), found
    return found


def wait(store: Store, now: int, mode: str = "at-least-once", max_tries: int = 5) -> Wait:
    found = store.claim_dispatch(now, mode, GAP, TIMEOUT, max_tries=max_tries)
    assert isinstance(found, Wait), found
    return found


def test_held_messages_go_out_merged_in_order_under_one_key(backend: Store) -> None:
    assert wait(backend, T0) == Wait(0, None)
    say(backend, T0, "one", "two")
    say(backend, T0 + 1, "three")
    sent = dispatch(backend, T0 + 2)
    assert sent.body.split("\n\n") == ["one", "two", "three"]
    assert (sent.tries, sent.urgent, sent.mode) == (1, False, "at-least-once")
    assert len(sent.message_ids) == 3 and sent.deadline > T0 + 2
    assert outbox_states(backend) == ["sending"] * 3
    assert backend.settle_dispatch(sent.key, "sent", T0 + 3, attempt=1)
    assert outbox_states(backend) == ["sent"] * 3
    assert {m.sent_at for m in backend.outbox(("sent",))} == {T0 + 3}
    assert backend.status().outbox == {"held": 0, "sending": 0, "sent": 3, "uncertain": 0}
    assert not backend.settle_dispatch(sent.key, "sent", T0 + 4, attempt=1)  # settled already


def test_the_gap_holds_messages_and_urgent_bypasses_it(backend: Store) -> None:
    # the article's case 8: three updates inside an hour
    sends = []
    for n, minute in enumerate((0, 10, 20)):
        now = T0 + minute * 60
        say(backend, now, f"update {n}")
        found = backend.claim_dispatch(now, "at-least-once", GAP, TIMEOUT)
        if isinstance(found, Dispatch):
            sends.append(found.body.replace("\n\n", " | "))
            assert backend.settle_dispatch(found.key, "sent", now, attempt=found.tries)
        else:
            assert found.until == T0 + GAP
    merged = dispatch(backend, T0 + 61 * 60)
    sends.append(merged.body.replace("\n\n", " | "))
    assert sends == ["update 0", "update 1 | update 2"]
    assert backend.settle_dispatch(merged.key, "sent", T0 + 61 * 60, attempt=1)

    say(backend, T0 + 62 * 60, "routine")
    assert wait(backend, T0 + 62 * 60).held == 1
    say(backend, T0 + 63 * 60, "the site is down", urgent=True)
    urgent = dispatch(backend, T0 + 63 * 60)
    assert urgent.urgent and urgent.body == "routine\n\nthe site is down"


def test_a_failed_send_holds_the_rows_again_and_does_not_use_the_gap(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0)
    assert backend.settle_dispatch(first.key, "failed", T0 + 1, "channel said no", attempt=1)
    [message] = backend.outbox()
    assert (message.state, message.error) == ("held", "channel said no")
    again = dispatch(backend, T0 + 2)  # no gap to wait out: nothing went out
    assert again.key != first.key and again.body == "hello"


def test_unknown_at_least_once_is_resent_under_the_same_key(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0)
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "killed", attempt=1)
    assert wait(backend, first.deadline).in_flight == 1  # not before the deadline
    resend = dispatch(backend, first.deadline + 1)  # within the gap, still resent
    assert (resend.key, resend.body, resend.message_ids, resend.tries) == (
        first.key, first.body, first.message_ids, 2)
    # the first try's late word cannot undo the second, but a certain delivery counts
    assert not backend.settle_dispatch(first.key, "failed", first.deadline + 2, attempt=1)
    assert outbox_states(backend) == ["sending"]
    assert backend.settle_dispatch(first.key, "sent", first.deadline + 3, attempt=1)
    assert outbox_states(backend) == ["sent"]
    assert [(e.action, e.detail) for e in backend.history("dispatch", first.key)][-1] == (
        "sent", "late word from try 1")


def test_a_dispatcher_that_died_is_taken_over_after_its_deadline(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0)  # ...and the dispatcher dies: no settle at all
    resend = dispatch(backend, first.deadline + 1)
    assert (resend.key, resend.tries) == (first.key, 2)
    assert backend.settle_dispatch(resend.key, "sent", first.deadline + 2, attempt=2)


def test_a_key_that_may_have_delivered_keeps_its_messages_when_a_try_fails(
        backend: Store) -> None:
    """Try 1's outcome is not known, so the channel may have the message under its key.
    A later try that certainly failed must not hand the rows to a new key (a channel
    deduping on the key would deliver twice): they stay, and go again after a backoff."""
    say(backend, T0, "hello")
    first = dispatch(backend, T0)
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "killed", attempt=1)
    second = dispatch(backend, first.deadline + 1)
    failed_at = first.deadline + 2
    assert backend.settle_dispatch(second.key, "failed", failed_at, "exit 1", attempt=2)
    [message] = backend.outbox()
    assert (message.state, message.dispatch_key, message.error) == (
        "sending", first.key, "exit 1")
    say(backend, failed_at, "newer")  # goes under a key of its own, once the gap allows
    assert wait(backend, failed_at + RESEND_BACKOFF).held == 1  # the backoff, then the gap
    third = dispatch(backend, failed_at + RESEND_BACKOFF + 1)
    assert (third.key, third.body, third.tries) == (first.key, "hello", 3)
    assert backend.settle_dispatch(third.key, "sent", failed_at + RESEND_BACKOFF + 2,
                                   attempt=3)
    assert [m.dispatch_key for m in backend.outbox(("sent",))] == [first.key]


def test_the_tries_of_a_key_are_bounded_then_it_is_parked_uncertain(backend: Store) -> None:
    say(backend, T0, "hello")
    now = T0
    outcomes = ["unknown", "failed", "unknown"]
    for attempt, outcome in enumerate(outcomes, 1):
        found = dispatch(backend, now, max_tries=3)
        assert (found.tries, found.max_tries) == (attempt, 3)
        assert backend.settle_dispatch(found.key, outcome, now + 1, "no word", attempt=attempt)
        now = max(found.deadline, now + 1 + RESEND_BACKOFF * 2) + 1
    assert outbox_states(backend) == ["uncertain"]  # after 3 tries: an operator decides
    [parked] = backend.outbox()
    assert parked.error == "no word (try 3 of 3: no more tries)"
    assert wait(backend, now + 10 * GAP, max_tries=3).held == 0  # never tried again
    assert backend.resolve_dispatch(found.key, True, now) == 1


def test_a_dispatcher_that_always_dies_is_not_retried_for_ever(backend: Store) -> None:
    say(backend, T0, "hello")
    now, keys = T0, []
    for _ in range(4):
        found = backend.claim_dispatch(now, "at-least-once", GAP, TIMEOUT, max_tries=3)
        if isinstance(found, Wait):
            break
        keys.append((found.key, found.tries))  # ...and the dispatcher dies mid-send
        now = found.deadline + 1
    assert [tries for _, tries in keys] == [1, 2, 3]
    assert len({key for key, _ in keys}) == 1
    assert outbox_states(backend) == ["uncertain"]
    [parked] = backend.outbox()
    assert parked.error == ("claim deadline passed with the outcome unknown after try 3 of 3: "
                            "no more tries")


def test_a_first_try_that_failed_still_frees_its_rows(backend: Store) -> None:
    """Certainly not delivered, never possibly: the rows may go under a new key."""
    say(backend, T0, "hello")
    first = dispatch(backend, T0, max_tries=1)
    assert backend.settle_dispatch(first.key, "failed", T0 + 1, "exit 1", attempt=1)
    assert outbox_states(backend) == ["held"]
    assert dispatch(backend, T0 + 2).key != first.key


def test_unknown_at_most_once_is_parked_until_an_operator_resolves_it(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0, "at-most-once")
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "timed out", attempt=1)
    assert outbox_states(backend) == ["uncertain"]
    assert wait(backend, first.deadline + GAP, "at-most-once").held == 0  # never resent
    assert backend.status().outbox["uncertain"] == 1
    assert backend.resolve_dispatch(first.key, False, T0 + GAP) == 1
    assert outbox_states(backend) == ["held"]
    with pytest.raises(NotAsAsked):
        backend.resolve_dispatch(first.key, True, T0 + GAP)
    again = dispatch(backend, first.deadline + GAP, "at-most-once")
    assert again.key != first.key and again.body == "hello"


def test_an_abandoned_at_most_once_claim_is_parked_not_resent(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0, "at-most-once")  # the dispatcher dies
    assert wait(backend, first.deadline + 1, "at-most-once").held == 0
    assert outbox_states(backend) == ["uncertain"]
    assert backend.outbox()[0].error == "claim deadline passed with the outcome unknown"
    assert backend.resolve_dispatch(first.key, True, first.deadline + 2) == 1
    [message] = backend.outbox(("sent",))
    assert message.dispatch_key == first.key


def test_resolve_refuses_what_it_cannot_resolve(backend: Store) -> None:
    with pytest.raises(BadInput) as refused:
        backend.resolve_dispatch("no-such-key", True, T0)
    assert str(refused.value) == "no dispatch with key 'no-such-key'"
    say(backend, T0, "hello")
    sent = dispatch(backend, T0)
    backend.settle_dispatch(sent.key, "sent", T0, attempt=1)
    with pytest.raises(NotAsAsked):
        backend.resolve_dispatch(sent.key, False, T0)


def test_bad_dispatch_arguments_are_refused(backend: Store) -> None:
    say(backend, T0, "hello")
    with pytest.raises(BadInput):
        backend.claim_dispatch(T0, "exactly-once", GAP, TIMEOUT)
    assert outbox_states(backend) == ["held"]


def test_dispatch_keys_are_never_reused(backend: Store) -> None:
    keys = set()
    for n in range(4):
        say(backend, T0 + n * GAP, f"m{n}")
        found = dispatch(backend, T0 + n * GAP)
        keys.add(found.key)
        backend.settle_dispatch(found.key, "failed" if n % 2 else "sent", T0 + n * GAP,
                                attempt=1)
    assert len(keys) == 4


def test_a_resend_is_the_same_try_count_for_every_word(backend: Store) -> None:
    """A take-over's try number is the one a settle must name, whatever the word."""
    for n, (word, state) in enumerate((("failed", "sending"), ("unknown", "sending"),
                                       ("sent", "sent"))):
        start = T0 + n * 10 * GAP  # each word's key starts afresh, past the gap
        say(backend, start, f"for {word}")
        first = dispatch(backend, start)
        resend = dispatch(backend, first.deadline + 1)  # the first dispatcher died
        assert (resend.key, resend.tries) == (first.key, 2)
        settle_at = first.deadline + 2
        if word != "sent":  # a certain delivery counts from any try
            assert not backend.settle_dispatch(resend.key, word, settle_at, attempt=1)
            assert not backend.settle_dispatch(resend.key, word, settle_at, attempt=3)
        assert backend.settle_dispatch(resend.key, word, settle_at, "no", attempt=2)
        [message] = [m for m in backend.outbox(OUTBOX_STATES) if m.body == f"for {word}"]
        assert message.state == state
        if word != "sent":
            third = dispatch(backend, settle_at + RESEND_BACKOFF + TIMEOUT * 2)
            assert (third.key, third.tries) == (first.key, 3)
            assert backend.settle_dispatch(third.key, "sent", third.deadline, attempt=3)


def test_a_resend_keeps_the_urgency_of_its_claim(backend: Store) -> None:
    say(backend, T0, "the site is down", urgent=True)
    first = dispatch(backend, T0)
    assert first.urgent
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, attempt=1)
    resend = dispatch(backend, first.deadline + 1)
    assert (resend.key, resend.urgent, resend.tries) == (first.key, True, 2)
    say(backend, T0, "routine")
    calm = backend.settle_dispatch(resend.key, "sent", first.deadline + 2, attempt=2)
    assert calm and not dispatch(backend, first.deadline + 3 + GAP).urgent


def test_an_operator_who_says_sent_restarts_the_gap_from_that_claim(backend: Store) -> None:
    say(backend, T0, "first")
    early = dispatch(backend, T0)
    backend.settle_dispatch(early.key, "sent", T0, attempt=1)
    later = T0 + 2 * GAP
    say(backend, later, "second")
    parked = dispatch(backend, later, "at-most-once")
    backend.settle_dispatch(parked.key, "unknown", later + 1, attempt=1)
    assert backend.resolve_dispatch(parked.key, True, later + 100) == 1
    [message] = backend.outbox(("sent",))[1:]
    assert (message.body, message.sent_at, message.error) == ("second", later, None)
    say(backend, later + 200, "third")
    assert wait(backend, later + GAP - 1).until == later + GAP  # counted from the claim
    assert dispatch(backend, later + GAP).body == "third"


def test_messages_resolved_unsent_were_never_sent(backend: Store) -> None:
    say(backend, T0, "hello")
    parked = dispatch(backend, T0, "at-most-once")
    backend.settle_dispatch(parked.key, "unknown", T0 + 1, "timed out", attempt=1)
    [message] = backend.outbox()
    assert (message.state, message.sent_at, message.error) == ("uncertain", None, "timed out")
    backend.resolve_dispatch(parked.key, False, T0 + 5)
    [message] = backend.outbox()
    assert (message.state, message.sent_at, message.dispatch_key) == ("held", None, None)
    again = dispatch(backend, T0 + 6, "at-most-once")  # no send to count a gap from
    assert (again.body, again.tries) == ("hello", 1) and again.key != parked.key


def test_a_late_sent_word_records_when_it_came(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0)  # its dispatcher stalls past the deadline
    second = dispatch(backend, first.deadline + 1)
    assert backend.settle_dispatch(second.key, "unknown", first.deadline + 2, attempt=2)
    assert backend.settle_dispatch(first.key, "sent", first.deadline + 5, attempt=1)
    [message] = backend.outbox(("sent",))
    assert (message.sent_at, message.dispatch_key) == (first.deadline + 5, first.key)


def test_a_dispatch_is_finished_when_it_is_settled(backend: Store) -> None:
    """Prune lets a settled dispatch go by when it finished (``keep_sent`` after)."""
    say(backend, T0, "hello")
    sent = dispatch(backend, T0)
    backend.settle_dispatch(sent.key, "sent", T0 + 40, attempt=1)
    say(backend, T0 + 50, "again")
    failed = backend.claim_dispatch(T0 + 50, "at-least-once", 0, TIMEOUT)
    assert isinstance(failed, Dispatch)
    backend.settle_dispatch(failed.key, "failed", T0 + 70, "exit 1", attempt=1)
    counts = [backend.prunable(Cutoffs(T0 + 100, 0, 0, at, 0, 0)).dispatches
              for at in (T0 + 40, T0 + 41, T0 + 70, T0 + 71)]
    assert counts == [0, 1, 1, 2]


def test_a_gap_of_zero_sends_whenever_something_is_held(backend: Store) -> None:
    for n in range(3):
        say(backend, T0, f"m{n}")
        found = backend.claim_dispatch(T0, "at-least-once", 0, TIMEOUT)
        assert isinstance(found, Dispatch) and found.body == f"m{n}"
        assert backend.settle_dispatch(found.key, "sent", T0, attempt=1)
    with pytest.raises(BadInput) as refused:
        backend.claim_dispatch(T0, "at-least-once", -1, TIMEOUT)
    assert str(refused.value) == "the gap cannot be negative and the timeout must be positive"


def test_each_failed_try_of_a_key_that_may_have_delivered_waits_twice_as_long(
        backend: Store) -> None:
    """Try 2 failing waits RESEND_BACKOFF, try 3 failing twice that (from that try's
    number, not the one before it)."""
    say(backend, T0, "hello")
    first = dispatch(backend, T0)
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "killed", attempt=1)
    now = first.deadline + 1
    for tries, backoff in ((2, RESEND_BACKOFF), (3, 2 * RESEND_BACKOFF)):
        again = dispatch(backend, now)
        assert (again.key, again.tries) == (first.key, tries)
        assert backend.settle_dispatch(again.key, "failed", now + 1, "exit 1", attempt=tries)
        assert wait(backend, now + 1 + backoff).in_flight == 1  # not before the backoff
        now = now + 1 + backoff + 1
    assert dispatch(backend, now).tries == 4


def test_the_gap_counts_from_a_resend_not_from_the_first_claim(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0)
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "killed", attempt=1)
    resent_at = first.deadline + 1
    resend = dispatch(backend, resent_at)
    assert backend.settle_dispatch(resend.key, "sent", resent_at + 1, attempt=2)
    say(backend, resent_at + 2, "next")
    held = wait(backend, T0 + GAP + 1)  # a gap from the first claim would have let it go
    assert held.until == resent_at + GAP
    assert dispatch(backend, resent_at + GAP).body == "next"


def last_line(store: Store, subject: str, subject_id: object) -> Entry:
    """The newest line of a message's or a dispatch's history."""
    return store.history(subject, subject_id)[-1]


def test_a_parked_dispatch_and_its_operator_s_verdict_are_told_line_by_line(
        backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0, "at-most-once")
    [message] = first.message_ids
    assert backend.settle_dispatch(first.key, "unknown", T0 + 1, "timed out", attempt=1)
    assert last_line(backend, "dispatch", first.key) == Entry(
        T0 + 1, "dispatch", first.key, "uncertain", None, "timed out")
    assert last_line(backend, "message", message) == Entry(
        T0 + 1, "message", str(message), "uncertain", None, first.key)
    assert backend.resolve_dispatch(first.key, False, T0 + 5) == 1
    assert last_line(backend, "dispatch", first.key) == Entry(
        T0 + 5, "dispatch", first.key, "resolved", None, "unsent")
    assert last_line(backend, "message", message) == Entry(
        T0 + 5, "message", str(message), "held again", None, f"resolved unsent: {first.key}")

    second = dispatch(backend, T0 + 6, "at-most-once")  # the dispatcher dies: parked
    assert wait(backend, second.deadline + 1, "at-most-once").held == 0
    assert last_line(backend, "dispatch", second.key) == Entry(
        second.deadline + 1, "dispatch", second.key, "uncertain", None,
        "claim deadline passed with the outcome unknown")
    assert backend.resolve_dispatch(second.key, True, second.deadline + 2) == 1
    assert last_line(backend, "dispatch", second.key) == Entry(
        second.deadline + 2, "dispatch", second.key, "resolved", None, "sent")
    assert last_line(backend, "message", message) == Entry(
        second.deadline + 2, "message", str(message), "sent", None,
        f"resolved sent: {second.key}")


def test_a_resolve_parks_an_abandoned_claim_first(backend: Store) -> None:
    """An at-most-once claim past its deadline is uncertain even before the next claim
    looks at it: an operator may resolve it at once."""
    say(backend, T0, "hello")
    first = dispatch(backend, T0, "at-most-once")  # the dispatcher dies
    with pytest.raises(NotAsAsked) as refused:
        backend.resolve_dispatch(first.key, True, first.deadline)  # not past it yet
    assert str(refused.value) == (f"dispatch {first.key} is sending, not uncertain; "
                                  "nothing to resolve")
    assert backend.resolve_dispatch(first.key, True, first.deadline + 1) == 1
    assert outbox_states(backend) == ["sent"]


def test_each_word_on_a_try_is_told_in_the_histories(backend: Store) -> None:
    say(backend, T0, "hello")
    first = dispatch(backend, T0, max_tries=1)
    [message] = first.message_ids
    assert backend.settle_dispatch(first.key, "failed", T0 + 1, "exit 1", attempt=1)
    assert last_line(backend, "message", message) == Entry(
        T0 + 1, "message", str(message), "held again", None, "exit 1")
    second = dispatch(backend, T0 + 2)
    assert backend.settle_dispatch(second.key, "unknown", T0 + 3, "killed", attempt=1)
    assert last_line(backend, "dispatch", second.key) == Entry(
        T0 + 3, "dispatch", second.key, "unknown", None, "killed")
    assert [(m.state, m.error) for m in backend.outbox()] == [("sending", "killed")]
    resend = dispatch(backend, second.deadline + 1)
    assert backend.settle_dispatch(resend.key, "failed", second.deadline + 2, "exit 1",
                                   attempt=2)
    assert last_line(backend, "dispatch", second.key) == Entry(
        second.deadline + 2, "dispatch", second.key, "failed", None,
        "try 2 of 5: exit 1; kept under the same key, which may have delivered already")


def test_messages_are_numbered_one_after_another(backend: Store) -> None:
    """As events are: each queued message takes the next id, within a run's answer and
    across runs."""
    say(backend, T0, "one", "two")
    say(backend, T0 + 1, "three")
    ids = [m.id for m in backend.outbox()]
    assert ids == list(range(ids[0], ids[0] + 3))
