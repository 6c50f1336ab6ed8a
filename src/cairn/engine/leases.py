"""Keeping leases alive, and knowing how fresh each one is.

One heartbeat thread per app renews every task this process holds with one
``UPDATE … WHERE owner = me … RETURNING id, fence``, so the cost of a heartbeat
does not grow with concurrency. The store's answer says which tasks it renewed,
and for each the keeper notes *when*, by this process's own monotonic clock,
read before the statement was sent: the lease then runs for at least ``lease``
seconds from that moment, whatever happens to the wall clock, the network or
the process afterwards.

That note is what makes an outside call safe after a pause. A process stopped
(SIGSTOP, a closed laptop lid, a VM migration) for longer than its lease wakes
up believing it still owns its tasks; its fence stops its writes, but only this
note can stop its calls. Before an operation's outside call, the engine asks
``fresh()``; a lease confirmed more than half a lease ago is renewed first with a
fenced write (``renew_now``), and a refusal means the task is gone: no call.

The note is kept on the wall clock too (the lease expiry written with it), and
a lease is fresh only if both clocks say so. The monotonic clock is immune to
the wall clock being set, but Linux's ``CLOCK_MONOTONIC`` (``time.monotonic``)
stands still while the machine is suspended (a closed laptop lid), and so does
macOS's: after a suspend only the wall clock, set again on waking, shows the
time gone, and it is by wall clocks that another process judged the lease
lapsed and took the task over.

While the store cannot be reached, the heartbeat tries again every
``RETRY_SECONDS`` with a freshly computed lease (``patient=False``: it never
sits inside the store's own reconnect loop holding a lease computed before the
outage), so leases are renewed within about a second of the store's return.

A renewal that gets no answer at all (a dead connection that still looks open)
is abandoned by the store after a third of a lease of silence, plus half that
to ask the server why (``cairn.store.pgwatch``), so the heartbeat knows its
leases are not being renewed before they can lapse; it says so, and says again
when one has gone a whole lease unconfirmed. From half a lease unconfirmed on,
each task stops at its next step boundary until a renewal of its own gets
through (``TaskRun.keep_lease``): if another worker took the task meanwhile,
that renewal is refused and the task ends there (``LeaseLost``), having started
nothing its new owner will run again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from cairn.clock import Clock
from cairn.store.protocol import Store
from cairn.store.records import InFlightNote

log = logging.getLogger("cairn")

# A lease confirmed less than this share of a lease ago is fresh: an outside
# call may go ahead without renewing first. Heartbeats come every third of a
# lease, so in normal running a lease is never older than a third.
FRESH_SHARE = 0.5
# While renewing fails (the store is down), try again this often.
RETRY_SECONDS = 0.25
# How long close() waits for the heartbeat thread to finish a beat in progress.
STOP_JOIN_SECONDS = 5.0
# While renewing keeps failing, say so again at most this often.
REPEAT_WARNING_SECONDS = 10.0


# What a running task is in now: (position, entry name, when it began), or None.
InFlight = tuple[int, str, datetime]


@dataclass(slots=True)
class _Held:
    """A task this app runs: its fence, when (monotonic) the store last
    confirmed its lease, and the expiry (wall clock) that confirmation wrote;
    where to read the entry it is in now, and the last one noted in the store."""

    fence: int
    confirmed_at: float
    lease_until: datetime
    probe: Callable[[], InFlight | None] | None = None
    noted: InFlight | None = None

    def confirmed(self, sent_at: float, until: datetime) -> None:
        """A renewal sent at ``sent_at`` and writing ``until`` was accepted."""
        self.confirmed_at = max(self.confirmed_at, sent_at)
        self.lease_until = max(self.lease_until, until)


class LeaseKeeper:
    """Renews this owner's leases every ``lease / 3`` seconds while tasks are held."""

    def __init__(self, store: Store, clock: Clock, owner: str, lease: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._owner = owner
        self.lease = lease
        self._interval = lease.total_seconds() / 3
        self._fresh_for = lease.total_seconds() * FRESH_SHARE
        self._held: dict[str, _Held] = {}
        self._stopped = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        # Monotonic time of the first failed beat of an outage (None: renewing works).
        self._failing_since: float | None = None
        self._warned_at: float | None = None
        # Whether this outage has been said to have outlasted a lease.
        self._warned_lapsed = False

    # -- what claims and the engine ask -------------------------------------------------
    def stamp(self) -> tuple[float, datetime]:
        """(now on the monotonic clock, the lease expiry to write): read together,
        before a claim or renewal is sent, so the lease is counted from no later
        than the moment the store accepted it."""
        return self._clock.monotonic(), self._clock.now() + self.lease

    def lease_until(self) -> datetime:
        return self._clock.now() + self.lease

    def hold(
        self, task_id: str, fence: int, confirmed_at: float, lease_until: datetime | None = None
    ) -> None:
        """A task was claimed under ``fence``; its claim, sent at ``confirmed_at``
        and writing ``lease_until`` (both from ``stamp()``; without it, a lease
        from now), confirmed its lease. Make sure the heartbeat runs."""
        until = self.lease_until() if lease_until is None else lease_until
        with self._cond:
            self._held[task_id] = _Held(fence, confirmed_at, until)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._beat, name="cairn-lease-keeper", daemon=True
                )
                self._thread.start()

    def follow(self, task_id: str, fence: int, probe: Callable[[], InFlight | None]) -> None:
        """At each beat, note in the store the entry ``probe`` says the task is
        in, when it changed since the last note (the dashboard's and the stall
        alert's step in flight). The step path only sets an attribute; the
        write is the heartbeat's, so a step still costs one commit, and the
        note lags the step by at most a beat."""
        with self._cond:
            held = self._held.get(task_id)
            if held is not None and held.fence == fence:
                held.probe = probe

    def drop(self, task_id: str) -> None:
        """A task finished or was handed back. The heartbeat notices at its next
        beat: waking it now would renew at once whenever a worker goes straight
        on to its next task, a needless write per task."""
        with self._cond:
            self._held.pop(task_id, None)

    def fresh(self, task_id: str, fence: int) -> bool:
        """True if the store confirmed this task's lease under ``fence`` less than
        half a lease ago, by this process's monotonic clock and by its wall clock
        (a suspended machine's monotonic clock stood still)."""
        with self._cond:
            held = self._held.get(task_id)
        if held is None or held.fence != fence:
            return False
        if self._clock.monotonic() - held.confirmed_at >= self._fresh_for:
            return False
        confirmed_wall = held.lease_until - self.lease
        return (self._clock.now() - confirmed_wall).total_seconds() < self._fresh_for

    def renew_now(self, task_id: str, fence: int) -> bool:
        """Renew one task's lease at once, fenced: False if the task is no longer
        ours under ``fence`` (another owner took it, or it was cancelled)."""
        sent_at, until = self.stamp()
        if not self._store.renew_task(task_id, fence, until):
            return False
        with self._cond:
            held = self._held.get(task_id)
            if held is not None and held.fence == fence:
                held.confirmed(sent_at, until)
        return True

    # -- stopping -----------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the heartbeat (the app is closing) and wait for a beat in flight,
        so the thread never touches a store that is being closed."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_JOIN_SECONDS)

    # -- the heartbeat --------------------------------------------------------------------
    def _beat(self) -> None:
        delay = self._interval
        try:
            while True:
                with self._cond:
                    # wait_for, not wait: a stop() that came before this wait
                    # must not leave the thread (and close()) waiting a full beat.
                    self._cond.wait_for(lambda: self._stopped, delay)
                    if not self._held or self._stopped:
                        # Cleared under the lock, so a hold() racing with this
                        # exit sees no thread and starts a new one.
                        self._thread = None
                        return
                delay = self._interval if self._renew() else min(RETRY_SECONDS, self._interval)
        finally:
            self._store.close_thread()

    def _renew(self) -> bool:
        """One beat: renew every lease this owner holds; False if the store could
        not be reached (the beat is tried again shortly)."""
        sent_at, until = self.stamp()
        try:
            renewed = self._store.renew_leases(self._owner, until, patient=False)
        except Exception as exc:  # noqa: BLE001 - logged; the next try is a moment away
            self._failed(exc, sent_at)
            return False
        notes: list[tuple[_Held, InFlight, InFlightNote]] = []
        with self._cond:
            for task_id, fence in renewed:
                held = self._held.get(task_id)
                if held is not None and held.fence == fence:
                    held.confirmed(sent_at, until)
                    now = held.probe() if held.probe is not None else None
                    if now is not None and now != held.noted:
                        notes.append((held, now, InFlightNote(task_id, fence, *now)))
        self._note(notes)
        if self._failing_since is not None:
            log.warning(
                "cairn: renewed %d lease(s) again after %.1fs without the store",
                len(renewed),
                self._clock.monotonic() - self._failing_since,
            )
            self._failing_since = None
            self._warned_at = None
            self._warned_lapsed = False
        return True

    def _note(self, notes: list[tuple[_Held, InFlight, InFlightNote]]) -> None:
        """Write the entries the renewed tasks are in now; a failure is only
        logged (the lease is what matters here), and the next beat tries again."""
        if not notes:
            return
        try:
            self._store.note_in_flight([note for _, _, note in notes])
        except Exception as exc:  # noqa: BLE001 - logged; the next beat notes it again
            log.debug("cairn: could not note the steps in flight: %s", exc)
            return
        with self._cond:
            for held, now, _ in notes:
                held.noted = now

    def _failed(self, error: Exception, at: float) -> None:
        if self._failing_since is None:
            self._failing_since = at
        if self._warned_at is None or at - self._warned_at >= REPEAT_WARNING_SECONDS:
            self._warned_at = at
            log.warning(
                "cairn: could not renew leases (%s); trying again every %.2fs",
                " ".join(str(error).split()) or type(error).__name__,
                min(RETRY_SECONDS, self._interval),
            )
        lapsed = self._unconfirmed_for(self.lease.total_seconds())
        if lapsed and not self._warned_lapsed:
            self._warned_lapsed = True
            log.warning(
                "cairn: %d lease(s) have gone unrenewed longer than the lease (%gs): other "
                "workers may take those tasks over now; each stops at its next step unless "
                "its own renewal gets through first",
                lapsed,
                self.lease.total_seconds(),
            )

    def _unconfirmed_for(self, seconds: float) -> int:
        """How many held leases the store last confirmed ``seconds`` ago or more."""
        now = self._clock.monotonic()
        with self._cond:
            return sum(now - held.confirmed_at >= seconds for held in self._held.values())
