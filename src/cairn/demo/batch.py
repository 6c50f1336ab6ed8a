"""The demo batch: review the ad settings of N apps, six checkpointed steps each.

Every step function also appends ``<task id> <step>`` to a step log when its
work has finished, so the demo can count, independently of cairn's own store,
how many times each step really ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from cairn import BatchReport, Cairn, Context, TaskDef, op_key
from cairn.demo import agent
from cairn.demo._io import append_line, count_lines, read_lines
from cairn.demo.platform import AdPlatform

STEPS = ("fetch", "analyze", "propose", "validate", "apply", "confirm")
CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class DemoFiles:
    """Where one demo keeps its store, step log, ledger and worker output."""

    workdir: Path

    @property
    def store(self) -> Path:
        return self.workdir / "demo.db"

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.store.resolve()}"

    @property
    def step_log(self) -> Path:
        return self.workdir / "step-runs.log"

    @property
    def ledger(self) -> Path:
        return self.workdir / "ad-platform-ledger.jsonl"

    @property
    def worker_log(self) -> Path:
        return self.workdir / "worker.log"

    def existing(self) -> list[Path]:
        """Files a previous demo left in this workdir."""
        store_files = [self.store, *(Path(f"{self.store}{end}") for end in ("-wal", "-shm"))]
        candidates = [*store_files, self.step_log, self.ledger, self.worker_log]
        return [path for path in candidates if path.exists()]


def batch_name(day: date) -> str:
    """The batch of one day's review: ``ad-review-YYYY-MM-DD``."""
    return f"ad-review-{day.isoformat()}"


def app_ids(count: int) -> list[str]:
    """``app-01`` … ``app-NN``."""
    return [f"app-{number:02d}" for number in range(1, count + 1)]


class StepLog:
    """One line ``<task id> <step>`` per finished run of a step function."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, task_id: str, step: str) -> None:
        append_line(self.path, f"{task_id} {step}")

    def lines(self) -> int:
        return count_lines(self.path)

    def entries(self) -> list[tuple[str, str]]:
        """Every logged run, in the order they finished."""
        pairs = (line.rsplit(" ", 1) for line in read_lines(self.path))
        return [(task_id, step) for task_id, step in pairs]

    def runs(self) -> Counter[tuple[str, str]]:
        return Counter(self.entries())


def _counted(log: StepLog, task_id: str, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        value = fn(*args)
        log.record(task_id, step)  # last thing the step does: its work is done
        return value

    return run


def build_app(files: DemoFiles) -> tuple[Cairn, TaskDef[..., dict[str, Any]]]:
    """A cairn app on the demo's store, with the ``review_app`` task registered."""
    app = Cairn(files.store_url)
    platform = AdPlatform(files.ledger)
    log = StepLog(files.step_log)

    @app.task(name="review_app")
    def review_app(ctx: Context, app_id: str) -> dict[str, Any]:
        def step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
            return ctx.step(name, _counted(log, ctx.task_id, name, fn), *args)

        settings = step("fetch", platform.fetch_settings, app_id)
        analysis = step("analyze", agent.analyze, app_id, settings)
        proposal = step("propose", agent.propose, app_id, analysis)
        checked = step("validate", platform.validate, app_id, proposal)
        # The side effect: at most once per app per batch, even across the kill.
        # If the kill lands after the platform acted but before cairn recorded
        # it, the key is in doubt and cairn asks the platform what happened.
        receipt = ctx.once(
            op_key(ctx.batch or "demo", app_id, "apply"),
            _counted(log, ctx.task_id, "apply", platform.apply),
            app_id,
            checked,
            reconcile=platform.find_change,
        )
        confirmed = step("confirm", platform.confirm, app_id, receipt)
        return {"app_id": app_id, "issue": analysis["issue"], "live": confirmed["live"]}

    return app, review_app


def run_worker(files: DemoFiles, batch: str, apps: int) -> BatchReport:
    """Run (or resume) the batch to its end in this process, without log lines."""
    app, review_app = build_app(files)
    with app:
        return app.run_batch(
            batch,
            review_app,
            [{"app_id": app_id} for app_id in app_ids(apps)],
            concurrency=CONCURRENCY,
            key=lambda item: str(item["app_id"]),
            progress=False,
        )
