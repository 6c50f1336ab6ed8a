"""Keeping leases alive: one heartbeat thread per app renews all of its tasks.

One ``UPDATE … WHERE owner = me`` renews every task this process runs, so the
cost of a heartbeat does not grow with concurrency. The thread runs only while
at least one task is held.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from cairn.clock import Clock
from cairn.store.protocol import Store

log = logging.getLogger("cairn")


class LeaseKeeper:
    """Renews this owner's leases every ``lease / 3`` seconds while tasks are held."""

    def __init__(self, store: Store, clock: Clock, owner: str, lease: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._owner = owner
        self.lease = lease
        self._held = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def lease_until(self) -> datetime:
        return self._clock.now() + self.lease

    def hold(self) -> None:
        """A task was claimed: make sure the heartbeat runs."""
        with self._cond:
            self._held += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, name="cairn-lease-keeper", daemon=True
                )
                self._thread.start()

    def drop(self) -> None:
        """A task finished or was handed back. The heartbeat notices at its next
        beat: waking it now would renew at once whenever a worker goes straight
        on to its next task, a needless write per task."""
        with self._cond:
            self._held -= 1

    def stop(self) -> None:
        """Stop the heartbeat now (the app is closing)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _beat(self) -> None:
        interval = self.lease.total_seconds() / 3
        try:
            while True:
                with self._cond:
                    self._cond.wait(interval)
                    if self._held == 0 or self._stopped:
                        # Cleared under the lock, so a hold() racing with this
                        # exit sees no thread and starts a new one.
                        self._thread = None
                        return
                try:
                    self._store.renew_leases(self._owner, self.lease_until())
                except Exception:
                    # A missed beat is retried next interval; the lease outlives two.
                    log.exception("cairn: could not renew leases; retrying in %.0fs", interval)
        finally:
            self._store.close_thread()
