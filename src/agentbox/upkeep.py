"""Operating an inbox for months: pruning it, checking it, surveying every inbox,
backing it up and restoring it.

Free of the CLI, like :mod:`agentbox.worker`: the commands (``prune``,
``doctor``, ``inboxes``, ``metrics``) and ``run``'s daily prune drive the
same functions. What may be pruned and what counts as healthy are rules
(:mod:`agentbox.rules.retention`, :mod:`agentbox.rules.health`); this module
only paces the work and gathers the readings.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbox.errors import AgentboxError, DatabaseError, UsageError
from agentbox.ledger.inboxes import Inboxes
from agentbox.ledger.status import Vitals
from agentbox.ledger.store import Store
from agentbox.rules import health
from agentbox.rules.breaker import Pause
from agentbox.rules.health import Check
from agentbox.rules.policy import Policy
from agentbox.rules.records import Lease
from agentbox.rules.retention import STEP, Cutoffs, PruneCounts, cutoffs, prune_due

RUN_STEPS = 20        # a run's daily prune does at most this many steps; the next run goes on
RECLAIM_STEP = 1024   # space handed back to the disk per step (SQLite: pages)
MIN_PAUSE = 0.025     # seconds between two steps, at least and at most: see _pause
MAX_PAUSE = 0.25


@dataclass(frozen=True)
class PruneReport:
    dry_run: bool
    counts: PruneCounts
    cutoffs: Cutoffs
    complete: bool     # False: stopped after its step budget; the next prune goes on
    bytes_before: int
    bytes_after: int

    def document(self) -> dict[str, Any]:
        c = self.counts
        return {"dry_run": self.dry_run, "complete": self.complete, "events": c.events,
                "messages": c.messages, "dispatches": c.dispatches,
                "keys_forgotten": c.keys_forgotten, "timer_history": c.timer_history,
                "steps": c.steps, "usage": c.usage,
                "done_before": self.cutoffs.done_before,
                "sent_before": self.cutoffs.sent_before,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}

    def describe(self) -> str:
        c = self.counts
        verb = "would prune" if self.dry_run else "pruned"
        text = (f"{verb} {c.events} done event(s), {c.messages} sent message(s), "
                f"{c.dispatches} dispatch(es), {c.timer_history} timer history line(s)"
                f"{f', {c.steps} finished step(s)' if c.steps else ''}"
                f"{f', {c.usage} usage record(s)' if c.usage else ''}; "
                f"{'would forget' if self.dry_run else 'forgot'} {c.keys_forgotten} "
                "key(s) past the dedupe window")
        if not self.dry_run:
            text += f"; {self.bytes_before:,} -> {self.bytes_after:,} bytes on disk"
        if not self.complete:
            text += " (stopped early: the next prune goes on)"
        return text


def _pause(busy: float, sleep: Callable[[float], None]) -> None:
    """Leave the write lock free at least as long as the step held it.

    SQLite's busy handler polls, at most 25 ms apart for its first 100 ms: a
    gap that long lets a waiting ingest in, so no ingest waits out more
    than about one step whatever the size of the prune. (A step that took
    long because it waited for the lock itself need not pause that long.)
    """
    sleep(min(max(MIN_PAUSE, busy), MAX_PAUSE))


def prune(store: Store, now: int, policy: Policy, *, dry_run: bool = False,
          step: int = STEP, max_steps: int | None = None,
          sleep: Callable[[float], None] = time.sleep) -> PruneReport:
    """Prune what the policy lets go, ``step`` rows per transaction.

    Stops after ``max_steps`` when given (``run`` bounds its share); an
    unfinished prune is not recorded, so the next one carries on. A finished
    one hands the freed space back and is recorded (``vitals().last_prune``).
    """
    cut = cutoffs(now, policy)
    before = store.vitals().bytes
    if dry_run:
        return PruneReport(True, store.prunable(cut), cut, True, before, before)
    canonicalise(store, sleep, max_steps)
    total, steps, complete = PruneCounts(), 0, False
    while max_steps is None or steps < max_steps:
        started = time.monotonic()
        done = store.prune_step(cut, step)
        total, steps = total.plus(done), steps + 1
        if done.total < step:
            complete = True
            break
        _pause(time.monotonic() - started, sleep)
    if complete:
        while True:
            started = time.monotonic()
            if not store.reclaim(RECLAIM_STEP):
                break
            _pause(time.monotonic() - started, sleep)
        store.record_prune(now)
    return PruneReport(False, total, cut, complete, before, store.vitals().bytes)


def canonicalise(store: Store, sleep: Callable[[float], None] = time.sleep,
                 max_steps: int | None = None) -> None:
    """Rewrite payloads stored before JCS (:mod:`agentbox.ledger.canonical`), pausing
    between steps as a prune does; at most ``max_steps`` steps (None: until done)."""
    steps = 0
    while max_steps is None or steps < max_steps:
        started = time.monotonic()
        if store.canonicalise_step() is None:
            return
        steps += 1
        _pause(time.monotonic() - started, sleep)


def auto_prune(store: Store, now: int, policy: Policy,
               sleep: Callable[[float], None] = time.sleep) -> PruneReport | None:
    """``run``'s prune: at most once a day, a bounded share each time (None: not due)."""
    if not prune_due(store.last_prune(), now, policy):
        return None
    return prune(store, now, policy, max_steps=RUN_STEPS, sleep=sleep)


def holder_alive(lease: Lease | None) -> bool | None:
    """Whether the lease holder's process still exists; None when it cannot be told.

    Holder ids are ``host:pid:random``: only a holder on this host can be
    looked up (a recycled pid reads as alive, which errs on the safe side).
    """
    import socket

    if lease is None:
        return None
    parts = lease.holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, pid = parts[0], int(parts[1])
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def diagnose(store: Store, now: int,
             pending_limit: int = health.PENDING_AGE_LIMIT) -> list[Check]:
    """Every `doctor` check of one inbox: the backend's own, then the store's state.

    A damaged inbox may fail to answer the state queries: that is one more
    failed check, never an error that hides the others.
    """
    checks = store.checks()
    try:
        vitals = store.vitals()
        lease = vitals.status.lease
        running = store.events(("running",), limit=max(1, vitals.status.events["running"]))
    except AgentboxError as exc:
        return [*checks, Check("state", False, f"cannot read the inbox's state: {exc}")]
    return [*checks,
            health.lease(lease, now, holder_alive(lease)),
            health.running([(e.id, e.claim_gen) for e in running], lease, now),
            health.uncertain(vitals.status.outbox["uncertain"]),
            health.pending(vitals.oldest_pending, now, pending_limit),
            health.paused(_paused(vitals.status.paused, now))]


def _paused(pause: Pause | None, now: int) -> str | None:
    """What doctor says of a pause: since when, why, and until when (or that a probe is
    due); None when the inbox is not paused."""
    if pause is None:
        return None
    from agentbox.spelling import when

    then = ("a probe run is due" if pause.until is not None and now >= pause.until
            else f"until {when(pause.until)}")
    return (f"paused since {when(pause.since)} ({pause.reason}), {then}; `agentbox resume` "
            "lifts it")


@dataclass(frozen=True)
class Survey:
    """One inbox as `inboxes` lists it: its vitals, or why they could not be read."""

    user: str
    location: str | None  # None: the inbox could not be opened (see error)
    vitals: Vitals | None
    error: str | None = None


def survey(inboxes: Inboxes) -> list[Survey]:
    """The vitals of every user's inbox there, each opened without creating anything.

    An inbox that cannot be read (corrupt, foreign, from a newer agentbox) is
    listed with its error rather than stopping the survey.
    """
    found = []
    for user in inboxes.users():
        try:
            store = inboxes.store(user)
            found.append(Survey(user, store.location, store.vitals()))
        except AgentboxError as exc:
            found.append(Survey(user, None, None, str(exc)))
    return found


SIDE_FILES = ("-wal", "-shm")  # what SQLite keeps beside an inbox file


def backup(store: Store, dest: str, replace: bool = False) -> int:
    """Write a consistent copy of the inbox to the file ``dest`` (0600) while writers
    carry on; its size in bytes. ``open_store(dest, user)`` opens it, on any machine.

    The engine copies its own file where it can (SQLite); otherwise the ledger
    writes the rows into a new SQLite inbox file from one snapshot. The copy is
    written beside ``dest``, synced, then put in place in one step: ``dest`` is
    whole or absent, never half written. Without ``replace`` an existing
    ``dest`` is refused (a UsageError), even one that appeared while the copy
    was being made.
    """
    import secrets
    from pathlib import Path

    target = Path(dest)
    if target.is_dir():
        raise UsageError(f"{dest}: is a folder; name the backup file")
    if not replace and os.path.lexists(target):
        raise UsageError(f"{dest} exists; pass --force to replace it")
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise AgentboxError(f"{dest}: cannot write the backup: {exc.strerror or exc}") from None
    try:
        _fill(store, temp)
        _sync(temp)
        if replace:
            for side in SIDE_FILES:  # a stale log beside the new file would be replayed into it
                Path(f"{target}{side}").unlink(missing_ok=True)
            os.replace(temp, target)
        else:
            try:
                os.link(temp, target)
            except FileExistsError:
                raise UsageError(f"{dest} exists; pass --force to replace it") from None
        _sync(target.parent)
    except OSError as exc:
        raise DatabaseError(f"{dest}: cannot write the backup: {exc.strerror or exc}") from None
    finally:
        _remove_with_sides(temp)
    return target.stat().st_size


def _remove_with_sides(temp: Path) -> None:
    """A temporary inbox file gone, with its log and the lock its store held."""
    from agentbox.backends.sqlite.presence import lock_path

    for path in (temp, *(Path(f"{temp}{side}") for side in SIDE_FILES),
                 Path(lock_path(str(temp)))):
        path.unlink(missing_ok=True)


def _fill(store: Store, temp: Path) -> None:
    """The copy itself, into the empty file ``temp``."""
    from agentbox.ledger.copy import copy_inbox
    from agentbox.location import open_store

    if store.engine.copy_file(temp):
        return
    # Closing the copy's only connection folds its log into the file, synced next.
    with open_store(temp, "", durable=False) as copy:
        copy_inbox(store, copy)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class RestoreReport:
    db: str
    backup: str
    replaced: str | None  # where the replaced file was kept (None: there was none)
    lacking: int          # events of the replaced inbox the backup did not have
    events: int           # events in the restored inbox
    next_id: int          # the lowest id a new event can get
    key_prefix: str       # what keys made from now on start with

    def document(self) -> dict[str, Any]:
        return {"db": self.db, "backup": self.backup, "replaced": self.replaced,
                "events_not_in_backup": self.lacking, "events": self.events,
                "next_id": self.next_id, "key_prefix": self.key_prefix}

    def describe(self) -> str:
        kept = (f"; the replaced inbox is kept as {self.replaced}"
                + (f" ({self.lacking} event(s) not in the backup are only there)"
                   if self.lacking else "")) if self.replaced else ""
        return (f"restored {self.db} from {self.backup}: {self.events} event(s), "
                f"new ids from {self.next_id}, new keys start {self.key_prefix}{kept}")


def restore(location: str, backup_file: str, now: int, *, force: bool = False) -> RestoreReport:
    """Replace the SQLite inbox file ``location`` with a copy of ``backup_file``.

    The backup is copied and checked (integrity, application id, schema version,
    migrated if older) before the inbox is touched. Then, holding the inbox alone
    (:func:`~agentbox.backends.sqlite.presence.take_alone`: Busy while any agentbox
    process has it open, or a live lease stands), the copy is given the ids and
    keys to go on with (ids above the highest of both files, a new key epoch, no
    lease, nothing left running) and put in place in one ``os.replace``; the
    replaced file is kept beside it under a new name. Without ``force`` an inbox
    holding events the backup lacks is refused (a UsageError naming how many).
    """
    from agentbox.backends.sqlite import presence

    live = os.path.abspath(location)
    source = Path(backup_file)
    if not source.is_file():
        raise UsageError(f"{backup_file}: no such file")
    if os.path.exists(live) and os.path.samefile(source, live):
        raise UsageError(f"{backup_file} is the inbox itself")
    temp = Path(live).with_name(f".{Path(live).name}.restore-{os.getpid()}.tmp")
    try:
        _restorable_copy(source, temp)
        alone = presence.take_alone(live)
        try:
            return _swap(live, temp, str(source), now, force)
        finally:
            presence.release(alone)
    finally:
        _remove_with_sides(temp)


def _restorable_copy(source: Path, temp: Path) -> None:
    """``source`` copied to ``temp`` (its log read with it), checked as an agentbox inbox
    and migrated, left as one self-contained file; BadInput when it is no inbox."""
    import contextlib
    import sqlite3

    from agentbox.backends.sqlite.engine import SqliteEngine
    from agentbox.errors import BadInput

    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    try:
        with (contextlib.closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro",
                                                 uri=True)) as src,
              contextlib.closing(sqlite3.connect(temp)) as dst):
            src.backup(dst)
            found = dst.execute("PRAGMA integrity_check").fetchone()
        if found is None or found[0] != "ok":
            raise BadInput(f"{source}: the backup is damaged "
                           f"(integrity check: {found[0] if found else 'no answer'})")
    except sqlite3.Error as exc:
        raise BadInput(f"{source}: not a readable SQLite file: {exc}") from None
    try:  # the application id and schema version, and the upgrade of an older one
        SqliteEngine(temp, make_folders=False, create=False).close()
    except AgentboxError as exc:
        raise BadInput(f"{source}: not an agentbox inbox agentbox can restore: {exc}") from None
    with contextlib.closing(sqlite3.connect(temp, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")  # no log beside it once it is swapped in


# The highest event and message ids a file has handed out, its dispatch counter and
# lease generation: the restored inbox goes on above the highest of both files.
_TOPS = """SELECT max(event_floor, ifnull((SELECT max(id) FROM {db}.events), 0)),
                  max(message_floor, ifnull((SELECT max(id) FROM {db}.outbox), 0)),
                  dispatch_seq, lease_generation,
                  ifnull((SELECT max(epoch) FROM {db}.epochs), 0)
           FROM {db}.inboxes WHERE id = 1"""


def _swap(live: str, temp: Path, backup_name: str, now: int, force: bool) -> RestoreReport:
    """Under the inbox held alone: the replaced file's word on the copy, then the swap."""
    import secrets
    import sqlite3

    from agentbox.errors import Busy
    from agentbox.rules.keys import epoch_prefix

    exists = os.path.exists(live)
    conn = sqlite3.connect(live if exists else ":memory:", isolation_level=None)
    try:
        conn.execute("ATTACH DATABASE ? AS bk", (str(temp),))
        tops = [conn.execute(_TOPS.format(db="bk")).fetchone()]
        lacking = 0
        if exists:
            _refuse_a_live_lease(conn, now, live)
            tops.append(conn.execute(_TOPS.format(db="main")).fetchone())
            lacking = int(conn.execute(
                """SELECT count(*) FROM main.events e WHERE NOT EXISTS (SELECT 1 FROM
                   bk.events b WHERE b.source = e.source AND b.source_id = e.source_id)"""
            ).fetchone()[0])
            if lacking and not force:
                raise UsageError(f"{live} holds {lacking} event(s) the backup does not "
                                 "have; pass --force to restore all the same (the replaced "
                                 "file is kept beside the inbox)")
        event_top, message_top, seq, generation, epoch = (
            max(int(row[n] or 0) for row in tops) for n in range(5))
        (instance,) = conn.execute("SELECT instance FROM bk.inboxes WHERE id = 1").fetchone()
        prefix = epoch_prefix(str(instance), secrets.token_hex(4))
        conn.execute("BEGIN")
        conn.execute("""UPDATE bk.inboxes SET event_floor = ?, message_floor = ?,
                            dispatch_seq = ?, lease_generation = ?,
                            lease_holder = ifnull(lease_holder, 'agentbox restore'),
                            lease_until = ?, lease_released = 1 WHERE id = 1""",
                     (event_top, message_top, seq, generation, now))
        conn.execute("""INSERT INTO bk.epochs (inbox_id, epoch, prefix, first_event, started_at)
                        VALUES (1, ?, ?, ?, ?)""", (epoch + 1, prefix, event_top + 1, now))
        # Whatever ran when the backup was taken is to run again, as after a crash.
        conn.execute("""UPDATE bk.events SET status = 'pending', updated_at = ?
                        WHERE status = 'running'""", (now,))
        events = int(conn.execute("SELECT count(*) FROM bk.events").fetchone()[0])
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise Busy(f"{live}: cannot restore now: {exc}") from None
    finally:
        conn.close()  # the last connection: the replaced file's log is folded into it
    kept = _keep_replaced(live, now) if exists else None
    try:
        os.replace(temp, live)
        _sync(Path(live).parent)
    except OSError as exc:
        raise DatabaseError(f"{live}: cannot put the backup in place: "
                            f"{exc.strerror or exc}") from None
    return RestoreReport(live, backup_name, kept, lacking, events, event_top + 1, prefix)


def _refuse_a_live_lease(conn: Any, now: int, live: str) -> None:
    """Busy while a lease stands whose holder may still be working (on another host,
    or a process of this one that still exists)."""
    from agentbox.errors import Busy
    from agentbox.ledger.core import LEASE_COLUMNS, lease_of
    from agentbox.rules.lease import taken

    lease = lease_of(conn.execute(f"SELECT {LEASE_COLUMNS} FROM main.inboxes").fetchone())
    if lease is not None and taken(lease, now) and holder_alive(lease) is not False:
        raise Busy(f"{live}: the lease is held by {lease.holder} (generation "
                   f"{lease.generation}); stop it, or wait for it to end, and try again")


def _keep_replaced(live: str, now: int) -> str:
    """The replaced file, linked under a new name beside the inbox (with its log, if
    one was left), before the backup takes the inbox's name."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    kept, n = f"{live}.replaced-{stamp}", 1
    while os.path.lexists(kept):
        n += 1
        kept = f"{live}.replaced-{stamp}-{n}"
    try:
        os.link(live, kept)
        for side in SIDE_FILES:
            if os.path.lexists(live + side):
                os.replace(live + side, kept + side)
    except OSError as exc:
        raise DatabaseError(f"{live}: cannot keep the replaced file: "
                            f"{exc.strerror or exc}") from None
    return kept
