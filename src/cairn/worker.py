"""``cairn worker``: a long-running process that claims and runs tasks.

A worker runs any pending task, of any batch, whose task function its app has
registered, up to ``concurrency`` at once. Start as many as you like, on as many
machines as share the store: claims never collide (one atomic update; on
PostgreSQL with ``FOR UPDATE SKIP LOCKED``), and every write is fenced.

Idle workers do not spin: they wait for the store's wake-up (PostgreSQL
LISTEN/NOTIFY, sent when tasks are enqueued) or a poll interval, whichever
comes first. SIGTERM (or Ctrl-C) stops claiming and lets running tasks finish;
a second one hands them back at once (their fence moves, so this process can
write nothing more for them) and exits. After SIGKILL, the leases expire and
other workers take the tasks over; on the same host, at once.

``versions`` limits a worker to the tasks of those app versions (the version a
task started on, or was enqueued under if it has not started; and tasks of
none, from before versions existed): old tasks can finish
on old code while new ones start on new code (docs/versions.md). Each worker
writes the versions it claims into the store's ``workers`` table when it
starts and every ``NOTE_EVERY`` seconds, and deletes its row when it stops.

A worker also ticks its app's schedules (``cairn.schedule``): each firing is
created once however many workers tick, and idle threads wake for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Literal

from cairn.engine.claim import WAIT, Claimer
from cairn.engine.config import EngineConfig
from cairn.engine.execute import Outcome, aexecute, execute
from cairn.errors import StoreError
from cairn.retention import Housekeeper
from cairn.schedule import Scheduler
from cairn.store.admin import admin
from cairn.store.postgres import redacted
from cairn.store.records import TaskRecord

if TYPE_CHECKING:
    from cairn.app import Cairn

log = logging.getLogger("cairn")

# Seconds between two writes of a worker's row (the versions it claims).
NOTE_EVERY = 10.0


@dataclass
class WorkerReport:
    """What a worker did before it stopped."""

    ran: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    # Tasks that suspended (ctx.wait_for) and now wait for a signal.
    suspended: int = 0
    handed_back: list[str] = field(default_factory=list)


class Worker:
    """Claims and runs tasks for one app until stopped (or, in burst mode, until
    nothing is left that it could run)."""

    def __init__(
        self,
        app: Cairn,
        *,
        concurrency: int = 4,
        idle_wait: float = 5.0,
        burst: bool = False,
        versions: Sequence[str] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if versions is not None and not versions:
            raise ValueError("versions is empty: give at least one version, or None for any")
        self.app = app
        self.concurrency = concurrency
        self.idle_wait = idle_wait
        self.burst = burst
        self.report = WorkerReport()
        self._names = tuple(sorted(app.task_names()))
        # Claim only tasks of these versions (or of none); None: any.
        self.versions = None if versions is None else tuple(versions)
        self._noted_at = float("-inf")
        self._engine: EngineConfig | None = None
        self._claimer: Claimer | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._errors: list[BaseException] = []
        # Stop signals received (by the handler), and how many were acted on.
        self._signals: list[int] = []
        self._signals_seen = 0
        self._scheduler = Scheduler(app, lambda created: self._wake.set())
        self._housekeeper: Housekeeper | None = None

    # -- control -----------------------------------------------------------------
    def stop(self) -> None:
        """Stop claiming; running tasks finish."""
        self._stopping.set()
        self._wake.set()

    def hand_back(self) -> None:
        """Give every running task back to the store at once."""
        self.stop()
        now = self.app.clock.now()
        with self._lock:
            running = dict(self._running)
        for task_id, fence in running.items():
            if self.app.store.release_task(task_id, fence, now):
                self.report.handed_back.append(task_id)
                log.info("cairn worker: handed task %s back", task_id)

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT once: finish and stop. Twice: hand back and stop now.

        The handler only notes the signal. It runs in the main thread between any
        two bytecodes, so taking a lock there (an ``Event``'s, the logging
        module's) could wait forever for a lock the interrupted code holds: the
        main loop, which comes round at least once a second, acts on it."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._signals.append(signum)  # list.append takes no lock of ours

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _act_on_signals(self) -> None:
        """The first stop signal: stop claiming, let running tasks finish. Any
        later one: hand them back and exit now."""
        while self._signals_seen < len(self._signals):
            signum = self._signals[self._signals_seen]
            self._signals_seen += 1
            if self._stopping.is_set():
                log.warning("cairn worker: handing running tasks back and stopping")
                self.hand_back()
                raise SystemExit(1)
            with self._lock:
                count = len(self._running)
            log.warning(
                "cairn worker: %s received; finishing %d running task(s) "
                "(send it again to hand them back now)",
                signal.Signals(signum).name,
                count,
            )
            self.stop()

    # -- running -------------------------------------------------------------------
    def run(self) -> WorkerReport:
        """Run until stopped; returns what was done."""
        if not self._names:
            raise ValueError("this app registers no task functions: nothing to run")
        log.info(
            "cairn worker: %s, %d at a time, tasks: %s",
            redacted(self.app.store_url),
            self.concurrency,
            ", ".join(self._names),
        )
        # Firings due now exist before the threads look for work (so a burst
        # worker runs them too).
        self._tick_schedules()
        self._note_versions()
        self._start_housekeeping()
        try:
            self._run_threads()
        finally:
            self._forget_versions()
        if self._errors:
            raise self._errors[0]
        return self.report

    def _note_versions(self) -> None:
        """Write this worker's row (the versions it claims) now and then, so
        ``cairn versions`` knows which tasks some live worker will take."""
        now = self.app.clock.monotonic()
        if now - self._noted_at < NOTE_EVERY:
            return
        self._noted_at = now
        claims = json.dumps(list(self.versions) if self.versions is not None else ["*"])
        try:
            self.app.store.note_worker(self.app.owner, claims, self.app.clock.now())
        except StoreError as exc:  # it says what is wrong: no traceback
            log.warning(
                "cairn worker: could not note its versions in the store (%s)",
                " ".join(str(exc).split()),
            )

    def _forget_versions(self) -> None:
        with contextlib.suppress(StoreError):
            self.app.store.forget_worker(self.app.owner)

    def _run_threads(self) -> None:
        threads = [
            threading.Thread(target=self._loop, name=f"cairn-worker-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            # The main thread listens for new work and acts on stop signals;
            # idle worker threads wake when it hears of some, and otherwise look
            # again every idle_wait seconds on their own.
            self._act_on_signals()
            if self._stopping.is_set():
                for thread in threads:
                    thread.join(0.2)
                continue
            if self.app.store.wait_for_work(min(self.idle_wait, 1.0)):
                self._wake.set()
            self._tick_schedules()
            self._note_versions()
            if self._housekeeper is not None:
                self._housekeeper.tick()

    def _start_housekeeping(self) -> None:
        """Retention, if the app has a policy: noted in the store, then run by
        whichever worker takes each run's turn (cairn.retention)."""
        if not self.app.retention:
            return
        store = admin(self.app.store, "retention=")
        keeper = Housekeeper(store, self.app.retention, self.app.clock, blobs=self.app.blobs)
        try:
            keeper.start()
        except StoreError as exc:  # it says what is wrong; the runs try again
            log.warning(
                "cairn worker: could not note the retention policy (%s)",
                " ".join(str(exc).split()),
            )
        self._housekeeper = keeper

    def _tick_schedules(self) -> None:
        if not self.app.schedules():
            return
        try:
            self._scheduler.maybe_tick()
        except Exception as exc:  # re-raised by run(), as a worker thread's error is
            log.exception("cairn worker: ticking schedules failed; stopping")
            with self._lock:
                self._errors.append(exc)
            self.stop()

    def _loop(self) -> None:
        try:
            self._claim_and_run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by run() in the main thread
            # A worker that cannot reach its store stops as a whole, loudly: the
            # process exits non-zero instead of idling on with fewer threads.
            with self._lock:
                first = not self._errors
                self._errors.append(exc)
            if first:
                _log_stopping(exc)
            self.stop()
        finally:
            self.app.store.close_thread()

    def _claim_and_run(self) -> None:
        while not self._stopping.is_set():
            task = self._claim_next()
            if task is None and self.burst:
                return
            if task is None or task == WAIT:
                self._wake.wait(self.idle_wait)
                self._wake.clear()
                continue
            self._run_one(task)

    @property
    def engine(self) -> EngineConfig:
        """The app's engine config, built when the worker first claims (so
        ``use_store`` may still be called between making the worker and running it)."""
        if self._engine is None:
            self._engine = self.app.engine()
        return self._engine

    def _claim_next(self) -> TaskRecord | Literal["wait"] | None:
        with self._lock:
            if self._claimer is None:
                self._claimer = Claimer(self.engine, None, self._names, self.versions)
            claimer = self._claimer
        return claimer.next()

    def _run_one(self, task: TaskRecord) -> None:
        with self._lock:
            self._running[task.id] = task.fence
        try:
            if self.app.registered(task.name).is_async:
                outcome = asyncio.run(aexecute(self.engine, task))
            else:
                outcome = execute(self.engine, task)
        finally:
            with self._lock:
                self._running.pop(task.id, None)
        self._count(outcome)

    def _count(self, outcome: Outcome) -> None:
        with self._lock:
            self.report.ran += 1
            if outcome.status == "completed":
                self.report.completed += 1
            elif outcome.status == "failed":
                self.report.failed += 1
            elif outcome.status == "lost":
                self.report.lost += 1
            elif outcome.status == "waiting":
                self.report.suspended += 1
        log.info("cairn worker: task %s %s", outcome.task_id, outcome.status)


def _log_stopping(error: BaseException) -> None:
    """Log the traceback of the error that stops the worker, once: the same
    event (a full disk, a lost server) usually stops every thread, and the
    command prints the error's message as its last line. A store's error says
    what the driver said, so the driver's own traceback is left out."""
    chain = not isinstance(error, StoreError)
    text = "".join(traceback.format_exception(error, chain=chain)).rstrip()
    log.error("cairn worker: stopping on this error:\n%s", text)
