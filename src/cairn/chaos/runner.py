"""``run_chaos``: SIGKILL a batch at random moments, resume it, and audit the store.

Each round starts the target in a new process, waits until the store shows
that it made progress, waits a further random delay (seeded), and SIGKILLs
it. The store is then snapshotted and held against the previous snapshot:
nothing recorded may vanish or change, and no completed step may run again.
After the last kill the target runs to its end, and the final audit checks
that every task completed, no operation is left unsettled, and no outside
effect happened twice.

The kill moments come from the seed, so a run is reproducible as far as the
machine's timing allows: the same seed gives the same delays, not the same
instructions interrupted.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cairn.chaos.batch import BATCH as BUILTIN_BATCH
from cairn.chaos.batch import TASKS_ENV
from cairn.chaos.integrity import Loss, losses, progress_marker, reruns, snapshot
from cairn.chaos.log import ENV as LOG_ENV
from cairn.chaos.log import read_log
from cairn.chaos.report import ChaosReport, RunRecord
from cairn.store import AdminStore, open_store
from cairn.store.records import FINISHED_STATUSES
from cairn.testing._targets import absolute, split
from cairn.testing._zygote import Launcher, Request, Running, borrowed

BUILTIN = "cairn.chaos.batch:run"
ENTRY = "cairn.chaos._child:run_target"
POLL_SECONDS = 0.005
OUTPUT_TAIL_CHARS = 2000
# The built-in batch gets this many tasks per kill by default: a round finishes
# three or four tasks on average, so every kill still finds work to interrupt.
TASKS_PER_KILL = 8
# A round may finish far more than that when this process is slow to see the
# target's progress (a loaded machine): before each round that is to be killed,
# the built-in batch is grown whenever fewer tasks than this are unfinished, so
# every requested kill is delivered to a run with work in hand, at any speed.
MIN_UNFINISHED = 4 * TASKS_PER_KILL


@dataclass(frozen=True, slots=True)
class _Setup:
    target: str
    store_url: str
    workdir: Path
    log: Path
    env: dict[str, str]
    restart_timeout: float
    run_timeout: float


def run_chaos(
    target: str = BUILTIN,
    *,
    store: str | None = None,
    kills: int = 50,
    seed: int = 0,
    max_delay: float = 0.05,
    restart_timeout: float = 30.0,
    run_timeout: float = 600.0,
    tasks: int | None = None,
    workdir: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    on_run: Callable[[RunRecord], None] | None = None,
) -> ChaosReport:
    """Kill ``target`` ``kills`` times at random moments, resume it, and report.

    Args:
        target: ``module:function`` (or ``file.py:function``); the function takes
            a store URL and runs the batch to its end. Default: the built-in batch.
        store: the store URL (default: a new SQLite file in ``workdir``).
        kills: how many SIGKILLs to deliver.
        seed: picks the delays.
        max_delay: each kill lands up to this many seconds after progress shows.
        restart_timeout: a run that shows no progress in this many seconds
            counts as a failed restart (and is killed).
        run_timeout: the final run must end within this many seconds.
        tasks: the built-in batch's size (default: 8 per kill, at least 20).
        workdir: where the log, the runs' output and the default store go
            (default: a new temporary directory, kept).
        env: more environment variables for the target's processes.
        on_run: called after each run, for live progress.
    """
    split(target)
    root = Path(workdir or tempfile.mkdtemp(prefix="cairn-chaos-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    extra = dict(env or {})
    if target == BUILTIN:
        extra.setdefault(TASKS_ENV, str(tasks or max(20, TASKS_PER_KILL * kills)))
    setup = _Setup(
        target=absolute(target),
        store_url=store or f"sqlite:///{root / 'chaos.db'}",
        workdir=root,
        log=root / "chaos-log.jsonl",
        env=extra,
        restart_timeout=restart_timeout,
        run_timeout=run_timeout,
    )
    started = time.monotonic()
    opened = open_store(setup.store_url)
    try:
        with borrowed() as launcher:
            rounds = _Rounds(setup, opened, launcher, random.Random(seed), max_delay, on_run)
            rounds.run(kills)
        return _report(setup, opened, rounds, seed, kills, time.monotonic() - started)
    finally:
        opened.close()


class _Rounds:
    """The kill-and-resume loop, with what it saw."""

    def __init__(
        self,
        setup: _Setup,
        store: AdminStore,
        launcher: Launcher,
        rng: random.Random,
        max_delay: float,
        on_run: Callable[[RunRecord], None] | None,
    ) -> None:
        self.setup = setup
        self.store = store
        self.launcher = launcher
        self.rng = rng
        self.max_delay = max_delay
        self.on_run = on_run
        self.runs: list[RunRecord] = []
        self.lost: list[Loss] = []
        self.notes: list[str] = []
        self.last = snapshot(store)

    def run(self, kills: int) -> None:
        for number in range(kills + 1):
            if number < kills:
                self._top_up(kills - number)
            record = self._one(number, kill=number < kills)
            self.runs.append(record)
            if self.on_run is not None:
                self.on_run(record)
            if not record.killed:
                if number < kills and record.exit_code == 0:
                    self.notes.append(
                        f"the batch finished after {number} kill(s) of {kills}: give it more work"
                    )
                return

    def _one(self, number: int, *, kill: bool) -> RunRecord:
        baseline = progress_marker(self.store)
        begun = time.monotonic()
        running = self.launcher.start(self._request(number))
        progress = self._wait_for_progress(running, baseline)
        delay, killed = None, False
        if kill and running.wait(0) is None:
            # Drawn whether or not it is used, so the seed gives the same delays.
            delay = self.rng.uniform(0, self.max_delay)
            if progress is None:
                delay = 0.0  # no progress in restart_timeout: a failed restart
            if running.wait(delay) is None:
                running.kill()
                killed = True
        exit_code = running.wait(self.setup.run_timeout)
        if exit_code is None:  # the final run hung: stop it, and say so
            running.kill()
            exit_code = running.wait()
            self.notes.append(f"run {number} did not end within {self.setup.run_timeout} s")
        self._audit(running.pid)
        return RunRecord(
            number=number,
            pid=running.pid,
            killed=killed,
            exit_code=exit_code,
            progress_seconds=progress,
            delay=delay,
            seconds=time.monotonic() - begun,
            output_tail=self._output(number)[-OUTPUT_TAIL_CHARS:],
        )

    def _top_up(self, kills_left: int) -> None:
        """Grow the built-in batch if it might finish before the kills left are
        delivered (its runs enqueue every task up to ``$CAIRN_CHAOS_TASKS``)."""
        if self.setup.target != absolute(BUILTIN):
            return
        counts = self.store.batch_counts(BUILTIN_BATCH)
        unfinished = sum(n for status, n in counts.items() if status not in FINISHED_STATUSES)
        if counts and unfinished < MIN_UNFINISHED:
            planned = int(self.setup.env[TASKS_ENV])
            self.setup.env[TASKS_ENV] = str(planned + TASKS_PER_KILL * kills_left)
            self.notes.append(
                f"grew the batch from {planned} to {self.setup.env[TASKS_ENV]} tasks, so the "
                f"{kills_left} kill(s) left each find work"
            )

    def _wait_for_progress(self, running: Running, baseline: tuple[int, int]) -> float | None:
        begun = time.monotonic()
        while time.monotonic() - begun < self.setup.restart_timeout:
            if progress_marker(self.store) != baseline:
                return time.monotonic() - begun
            if running.wait(POLL_SECONDS) is not None:
                changed = progress_marker(self.store) != baseline
                return time.monotonic() - begun if changed else None
        return None

    def _audit(self, pid: int) -> None:
        now = snapshot(self.store)
        lines = [line for line in read_log(self.setup.log) if line.pid == pid]
        self.lost += losses(self.last, now) + reruns(self.last, lines)
        self.last = now

    def _request(self, number: int) -> Request:
        return Request(
            entry=ENTRY,
            spec={"target": self.setup.target, "store_url": self.setup.store_url},
            cwd=str(Path.cwd()),
            output=str(self._output_path(number)),
            env={LOG_ENV: str(self.setup.log), **self.setup.env},
        )

    def _output_path(self, number: int) -> Path:
        return self.setup.workdir / f"run-{number:03d}.out"

    def _output(self, number: int) -> str:
        path = self._output_path(number)
        return path.read_text(errors="replace") if path.exists() else ""


def _report(
    setup: _Setup, store: AdminStore, rounds: _Rounds, seed: int, kills: int, seconds: float
) -> ChaosReport:
    log = read_log(setup.log)
    effects = Counter(line.key for line in log if line.kind == "effect")
    step_runs = Counter((line.task_id, line.name) for line in log if line.kind == "step")
    operations = list(store.list_operations())
    return ChaosReport(
        target=setup.target,
        store_url=setup.store_url,
        seed=seed,
        kills_requested=kills,
        runs=tuple(rounds.runs),
        lost=tuple(rounds.lost),
        duplicate_effects={key: n for key, n in effects.items() if n > 1},
        redundant_steps=sum(n - 1 for n in step_runs.values()),
        op_recalls=sum(op.calls - 1 for op in operations if op.calls > 1),
        effects=sum(effects.values()),
        tasks=sum(1 for _ in store.list_tasks()),
        incomplete=tuple(_incomplete(store)),
        unsettled_operations=tuple(
            f"{op.key} ({op.status})" for op in operations if op.status != "completed"
        ),
        wall_clock=seconds,
        notes=tuple(rounds.notes),
    )


def _incomplete(store: AdminStore) -> list[str]:
    rows = store.list_tasks()
    try:
        return [f"{task.id} ({task.status})" for task in rows if task.status != "completed"]
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()
