"""The outbox and its dispatches.

When held messages may go out, what a sender's word means and how a claim
ends are decided in :mod:`agentbox.rules.outbox`; this module claims and
settles rows inside transactions holding the inbox's lock, so two
dispatchers (in two processes, on two hosts) never claim the same messages.
Every try of a dispatch has a number; a settle names the try it speaks for,
so a dispatcher that comes back after another took over its expired claim
cannot undo the newer try.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentbox.ledger import history
from agentbox.ledger.core import KEY_PREFIX, Core
from agentbox.rules.policy import DEFAULT_MAX_SEND_TRIES
from agentbox.rules.records import (
    DEFAULT_CHANNEL,
    OPEN_OUTBOX_STATES,
    OUTBOX_LISTED,
    SendOutcome,
)

if TYPE_CHECKING:
    from agentbox.ledger.engine import Engine, Reader, Tx
    from agentbox.rules.answer import Message
    from agentbox.rules.outbox import Dispatch, OutboxMessage, Wait
    from agentbox.rules.quiet import Limits


def queue_in(engine: Engine, tx: Tx, now: int, generation: int | None,
             messages: Sequence[Message]) -> list[int]:
    """Hold a run's messages, inside its finish transaction."""
    if not messages:
        return []
    values = ", ".join(f"({engine.new_id('outbox', n + 1)}, :box, :body{n}, :urgent{n}, "
                       f":generation, :now, :channel{n})" for n in range(len(messages)))
    params: dict[str, Any] = {f"body{n}": m.body for n, m in enumerate(messages)}
    params.update({f"urgent{n}": m.urgent for n, m in enumerate(messages)})
    params.update({f"channel{n}": m.channel for n, m in enumerate(messages)})
    ids = sorted(int(r[0]) for r in tx.rows(
        f"""INSERT INTO outbox (id, inbox_id, body, urgent, generation, created_at, channel)
            VALUES {values} RETURNING id""", generation=generation, now=now, **params))
    history.record_many(tx, now, "message", "queued", ((i, generation, None) for i in ids))
    return ids


def _message_ids(tx: Tx, key: str) -> tuple[int, ...]:
    rows = tx.rows("""SELECT id FROM outbox WHERE inbox_id = :box AND dispatch_key = :key
                      ORDER BY id""", key=key)
    return tuple(int(r[0]) for r in rows)


def _set_rows(tx: Tx, key: str, state: str, error: str | None = None,
              sent_at: int | None = None) -> tuple[int, ...]:
    """Move a dispatch's rows to ``state``; held rows leave the dispatch."""
    rows = tx.rows(
        """UPDATE outbox SET state = :state, error = :error,
               sent_at = COALESCE(:sent_at, sent_at),
               dispatch_key = CASE WHEN :state = 'held' THEN NULL ELSE dispatch_key END
           WHERE inbox_id = :box AND dispatch_key = :key RETURNING id""",
        state=state, error=error, sent_at=sent_at, key=key)
    return tuple(sorted(int(r[0]) for r in rows))


def _note_error(tx: Tx, key: str, error: str | None) -> None:
    """The sender's word on the messages of a key that keeps them."""
    tx.run("UPDATE outbox SET error = :error WHERE inbox_id = :box AND dispatch_key = :key",
           error=error, key=key)


def _finish(tx: Tx, key: str, state: str, now: int, error: str | None = None) -> None:
    tx.run("""UPDATE dispatches SET state = :state, finished_at = :now, error = :error
              WHERE inbox_id = :box AND key = :key""", state=state, now=now, error=error,
           key=key)


def _mark_sent(tx: Tx, key: str, now: int, sent_at: int, detail: str | None = None) -> None:
    _finish(tx, key, "sent", now)
    ids = _set_rows(tx, key, "sent", sent_at=sent_at)
    history.record(tx, now, "dispatch", key, "sent", detail=detail)
    history.record_many(tx, now, "message", "sent", ((i, None, key) for i in ids))


def _park(tx: Tx, key: str, now: int, error: str) -> None:
    """At-most-once with the outcome unknown: never resent until an operator says."""
    _finish(tx, key, "uncertain", now, error)
    ids = _set_rows(tx, key, "uncertain", error)
    history.record(tx, now, "dispatch", key, "uncertain", detail=error)
    history.record_many(tx, now, "message", "uncertain", ((i, None, key) for i in ids))


Expired = tuple[str, str, str, bool, int, int]  # key, mode, body, urgent, tries, max_tries


def _park_expired(tx: Tx, now: int, channel: str | None = None) -> list[Expired]:
    """Park the claims past their deadline (their dispatcher is gone, or a failed
    try's backoff is over) that may not be tried again; the others, oldest first.
    Of one channel, or of all (``channel`` None)."""
    from agentbox.rules import outbox as rules

    left: list[Expired] = []
    only = "" if channel is None else "AND channel = :channel"
    for key, mode, body, urgent, tries, max_tries in tx.rows(
            f"""SELECT key, mode, body, urgent, tries, max_tries FROM dispatches
                WHERE inbox_id = :box AND state = 'sending' AND deadline < :now
                {only}
                ORDER BY seq""", now=now, channel=channel):
        if rules.on_expiry(str(mode), int(tries), int(max_tries)) == "resend":
            left.append((str(key), str(mode), str(body), bool(urgent), int(tries),
                         int(max_tries)))
        else:
            _park(tx, str(key), now, rules.expiry_reason(str(mode), int(tries), int(max_tries)))
    return left


def _take_over(tx: Tx, now: int, timeout: int, channel: str) -> Dispatch | None:
    """Park what may not be tried again; take over the oldest claim that may.

    The resend is a new claim of the same key: its deadline and its claim time
    are now's, so the gap counts from the resend, not from the first claim.
    """
    from agentbox.rules import outbox as rules
    from agentbox.rules.outbox import Dispatch

    left = _park_expired(tx, now, channel)
    if not left:
        return None
    key, mode, body, urgent, tries, max_tries = left[0]
    deadline = rules.claim_deadline(now, timeout)
    tx.run("""UPDATE dispatches SET tries = :tries, deadline = :deadline, claimed_at = :now
              WHERE inbox_id = :box AND key = :key""", tries=tries + 1, deadline=deadline,
           now=now, key=key)
    ids = _message_ids(tx, key)
    history.record(tx, now, "dispatch", key, "resending",
                   detail=rules.resend_detail(tries + 1, max_tries))
    history.record_many(tx, now, "message", "resending", ((i, None, key) for i in ids))
    return Dispatch(key, mode, body, ids, urgent, tries + 1, deadline, max_tries, channel)


def _last_send(tx: Tx, channel: str) -> int | None:
    """When the outbox last spoke (or may have): the gap counts from here.

    Failed sends (certainly not delivered) and dispatches an operator resolved
    as unsent do not count.
    """
    from agentbox.rules.outbox import SPOKE_STATES

    spoke = "(" + ", ".join(f"'{s}'" for s in SPOKE_STATES) + ")"
    row = tx.one(f"""SELECT MAX(claimed_at) FROM dispatches
                     WHERE inbox_id = :box AND state IN {spoke} AND channel = :channel""",
                 channel=channel)
    return None if row is None or row[0] is None else int(row[0])


def _sent_in(tx: Reader, channel: str, day: tuple[int, int]) -> int:
    """The channel's sends (that may have spoken) claimed in the local day, for a cap."""
    from agentbox.rules.outbox import SPOKE_STATES

    spoke = "(" + ", ".join(f"'{s}'" for s in SPOKE_STATES) + ")"
    row = tx.one(f"""SELECT COUNT(*) FROM dispatches
                     WHERE inbox_id = :box AND state IN {spoke} AND channel = :channel
                       AND claimed_at >= :start AND claimed_at < :end""",
                 channel=channel, start=day[0], end=day[1])
    assert row is not None  # COUNT(*) answers one row
    return int(row[0])


def _in_flight(tx: Tx, channel: str) -> tuple[int, int | None]:
    row = tx.one("""SELECT COUNT(*), MIN(deadline) FROM dispatches
                    WHERE inbox_id = :box AND state = 'sending' AND channel = :channel""",
                 channel=channel)
    assert row is not None
    return int(row[0]), None if row[1] is None else int(row[1])


def _wait(tx: Reader, now: int, gap: int, channel: str, limits: Limits | None,
          flags: list[bool]) -> Wait | None:
    """Why the held messages (their urgent flags) of a channel wait, or None: they go."""
    from agentbox.rules import outbox as rules
    from agentbox.rules.outbox import Wait
    from agentbox.rules.quiet import Limits

    limits = limits or Limits()
    last = _last_send(tx, channel)  # type: ignore[arg-type]
    held = rules.held_by(flags, last, gap, now, limits, lambda day: _sent_in(tx, channel, day))
    if held is None and flags:
        return None
    reason, until = held if held is not None else (None, rules.next_allowed(last, gap))
    return Wait(len(flags), until, *_in_flight(tx, channel), reason)  # type: ignore[arg-type]


class Outbox(Core):
    """Held messages, claimed for a send, settled by the sender's word."""

    def claim_dispatch(self, now: int, mode: str, gap: int, timeout: int,
                       max_tries: int = DEFAULT_MAX_SEND_TRIES, channel: str = DEFAULT_CHANNEL,
                       limits: Limits | None = None) -> Dispatch | Wait:
        """Claim the next send of ``channel`` (an overdue resend of a key first), or say
        why not.

        ``mode`` and ``max_tries`` are recorded on a new claim and hold for all
        its tries; a resend keeps those of its claim. What a try's word does is
        :func:`agentbox.rules.outbox.on_settle`; what holds a channel's messages
        (gap, quiet hours, daily cap), :func:`agentbox.rules.outbox.held_by`.
        Channels never wait for each other: each has its own rows, gap and keys.
        """
        from agentbox.rules import outbox as rules
        from agentbox.rules.outbox import Dispatch

        rules.check_claim(mode, gap, timeout, max_tries)
        with self._locked() as (tx, _):
            resend = _take_over(tx, now, timeout, channel)
            if resend is not None:
                return resend
            held = tx.rows("""SELECT id, body, urgent FROM outbox WHERE inbox_id = :box
                              AND state = 'held' AND channel = :channel ORDER BY id""",
                           channel=channel)
            wait = _wait(tx, now, gap, channel, limits, [bool(u) for _, _, u in held])
            if wait is not None:
                return wait
            flags = [bool(u) for _, _, u in held]
            urgent = any(flags)
            row = tx.one("""UPDATE inboxes SET dispatch_seq = dispatch_seq + 1
                            WHERE id = :box RETURNING dispatch_seq""")
            prefix = tx.one(KEY_PREFIX)
            assert row is not None
            assert prefix is not None
            seq, key = int(row[0]), rules.dispatch_key(str(prefix[0]), int(row[0]))
            body = rules.merged([str(b) for _, b, _ in held])
            deadline = rules.claim_deadline(now, timeout)
            tx.run("""INSERT INTO dispatches (inbox_id, seq, key, mode, body, urgent,
                                              claimed_at, deadline, max_tries, channel)
                      VALUES (:box, :seq, :key, :mode, :body, :urgent, :now, :deadline,
                              :max_tries, :channel)""", seq=seq, key=key, mode=mode,
                   body=body, urgent=urgent, now=now, deadline=deadline, max_tries=max_tries,
                   channel=channel)
            ids = tuple(int(i) for i, _, _ in held)
            # Every held row was read under the lock: the newest id bounds them all.
            tx.run("""UPDATE outbox SET state = 'sending', dispatch_key = :key
                      WHERE inbox_id = :box AND state = 'held' AND channel = :channel
                        AND id <= :last""", key=key, last=ids[-1], channel=channel)
            history.record(tx, now, "dispatch", key, "claimed",
                           detail=f"{len(ids)} message(s), {mode}{', urgent' if urgent else ''}")
            history.record_many(tx, now, "message", "sending", ((i, None, key) for i in ids))
            return Dispatch(key, mode, body, ids, urgent, 1, deadline, max_tries, channel)

    def channel_wait(self, now: int, gap: int, channel: str = DEFAULT_CHANNEL,
                     limits: Limits | None = None) -> Wait | None:
        """Why the channel's held messages wait now (as a claim would find them), or None
        when they may go; reads only (for `outbox` and `status`)."""
        reader = self._read()
        held = reader.rows("""SELECT urgent FROM outbox WHERE inbox_id = :box
                              AND state = 'held' AND channel = :channel""", channel=channel)
        return _wait(reader, now, gap, channel, limits, [bool(u) for (u,) in held])

    def channels_held(self) -> dict[str, int]:
        """The held messages of each channel that has any."""
        return {str(c): int(n) for c, n in self._read().rows(
            """SELECT channel, COUNT(*) FROM outbox WHERE inbox_id = :box AND state = 'held'
               GROUP BY channel ORDER BY channel""")}

    def settle_dispatch(self, key: str, outcome: SendOutcome, now: int,
                        error: str | None = None, *, attempt: int) -> bool:
        """Record the sender's word for try ``attempt``; False when it changed nothing.

        A settle for a try that is no longer current (settled already, parked as
        uncertain, or taken over by another dispatcher) is refused, except for
        ``sent``: a certain delivery settles the dispatch whichever try made it.
        """
        from agentbox.rules import outbox as rules

        with self._locked() as (tx, _):
            row = tx.one("""SELECT state, mode, tries, max_tries FROM dispatches
                            WHERE inbox_id = :box AND key = :key""", key=key)
            if row is None:
                return False
            mode, tries, max_tries = str(row[1]), int(row[2]), int(row[3])
            action = rules.on_settle(str(row[0]), mode, tries, attempt, outcome, max_tries)
            if action == "stale":
                return False
            if action == "late-sent":
                _mark_sent(tx, key, now, now, detail=f"late word from try {attempt}")
            elif action == "sent":
                _mark_sent(tx, key, now, now)
            elif action == "failed":
                _finish(tx, key, "failed", now, error)
                ids = _set_rows(tx, key, "held", error)
                history.record(tx, now, "dispatch", key, "failed", detail=error)
                history.record_many(tx, now, "message", "held again",
                                    ((i, None, error) for i in ids))
            elif action == "retry":
                # An earlier try may have delivered: the rows stay under this key.
                tx.run("""UPDATE dispatches SET error = :error, deadline = :deadline
                          WHERE inbox_id = :box AND key = :key""",
                       error=error, deadline=rules.resend_after(now, tries), key=key)
                _note_error(tx, key, error)
                history.record(tx, now, "dispatch", key, "failed",
                               detail=rules.retry_detail(tries, max_tries, error))
            elif action == "park":
                _park(tx, key, now, rules.park_reason(mode, error, tries, max_tries))
            else:
                # at-least-once: the claim stays; the next dispatch after its deadline
                # resends the same rows under the same key.
                tx.run("""UPDATE dispatches SET error = :error
                          WHERE inbox_id = :box AND key = :key""", error=error, key=key)
                _note_error(tx, key, error)
                history.record(tx, now, "dispatch", key, "unknown", detail=error)
            return True

    def resolve_dispatch(self, key: str, sent: bool, now: int) -> int:
        """An operator's verdict on an uncertain dispatch (unsent rows are held again);
        returns how many messages it covered."""
        from agentbox.errors import BadInput, NotAsAsked

        with self._locked() as (tx, _):
            _park_expired(tx, now)
            row = tx.one("""SELECT state, claimed_at FROM dispatches
                            WHERE inbox_id = :box AND key = :key""", key=key)
            if row is None:
                raise BadInput(f"no dispatch with key {key!r}")
            if row[0] != "uncertain":
                raise NotAsAsked(f"dispatch {key} is {row[0]}, not uncertain; nothing to resolve")
            verdict = "sent" if sent else "unsent"
            _finish(tx, key, verdict, now)
            # A send the operator confirms happened when it was claimed.
            ids = _set_rows(tx, key, "sent" if sent else "held",
                            sent_at=int(row[1]) if sent else None)
            history.record(tx, now, "dispatch", key, "resolved", detail=verdict)
            history.record_many(tx, now, "message", "sent" if sent else "held again",
                                ((i, None, f"resolved {verdict}: {key}") for i in ids))
            return len(ids)

    def outbox(self, states: Sequence[str] = OPEN_OUTBOX_STATES,
               limit: int = OUTBOX_LISTED) -> list[OutboxMessage]:
        """Messages in ``states``, oldest first; past ``limit``, the newest ones."""
        from agentbox.ledger.core import among
        from agentbox.rules.outbox import OutboxMessage

        chosen, params = among(list(states))
        rows = self._read().rows(
            f"""SELECT id, body, urgent, state, dispatch_key, created_at, sent_at, error,
                       channel
                FROM outbox WHERE inbox_id = :box AND state IN {chosen}
                ORDER BY id DESC LIMIT :limit""", limit=limit, **params)
        return [OutboxMessage(int(i), str(b), bool(u), str(s), k, int(c),
                              None if t is None else int(t), e, str(ch))
                for i, b, u, s, k, c, t, e, ch in reversed(rows)]
