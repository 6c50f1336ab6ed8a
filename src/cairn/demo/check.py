"""What the store said right after the kill, and the count of every step's runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cairn.demo.batch import STEPS, DemoFiles, StepLog, app_ids
from cairn.demo.platform import applies_per_app
from cairn.store import open_store


@dataclass(frozen=True, slots=True)
class KillSnapshot:
    """The batch as the store recorded it when the worker died."""

    steps_logged: int
    counts: dict[str, int]
    # Checkpointed steps of every task still to run (pending or running), by id.
    unfinished: dict[str, int]
    in_flight: int
    # Tasks in flight that had not yet checkpointed their first step.
    in_flight_fresh: int

    @property
    def completed(self) -> int:
        return self.counts.get("completed", 0)

    @property
    def resumable(self) -> dict[str, int]:
        """Unfinished tasks with steps on record: the rerun resumes them mid-way."""
        return {task_id: n for task_id, n in self.unfinished.items() if n}

    @property
    def fresh(self) -> int:
        return sum(1 for n in self.unfinished.values() if n == 0)

    @property
    def replayable_steps(self) -> int:
        return sum(self.unfinished.values())


def read_snapshot(files: DemoFiles, batch: str) -> KillSnapshot:
    """Read the store (not the worker, which is dead) after the kill."""
    store = open_store(files.store_url)
    try:
        counts = dict(store.batch_counts(batch))
        unfinished: dict[str, int] = {}
        in_flight_fresh = 0
        for task in store.list_tasks(batch=batch):
            if task.status in ("pending", "running"):
                history = store.load_history(task.id).values()
                unfinished[task.id] = sum(
                    1 for rec in history if rec.kind in ("step", "op") and rec.status == "completed"
                )
                in_flight_fresh += task.status == "running" and unfinished[task.id] == 0
    finally:
        store.close()
    return KillSnapshot(
        steps_logged=StepLog(files.step_log).lines(),
        counts=counts,
        unfinished=unfinished,
        in_flight=counts.get("running", 0),
        in_flight_fresh=in_flight_fresh,
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """Every (task, step) pair with how many times its function ran, and the ledger."""

    batch_total: int
    batch_completed: int
    runs: Counter[tuple[str, str]]
    run1_by_step: Counter[str]
    run2_by_step: Counter[str]
    applies: Counter[str]
    expected: list[tuple[str, str]] = field(default_factory=list)
    # Claims per operation key of this batch (the audit log's ``calls``): a key
    # whose first call was killed before the platform acted is claimed twice.
    op_calls: dict[str, int] = field(default_factory=dict)

    @property
    def once(self) -> int:
        return sum(1 for pair in self.expected if self.runs[pair] == 1)

    @property
    def repeated(self) -> dict[tuple[str, str], int]:
        return {pair: n for pair, n in self.runs.items() if n > 1}

    @property
    def missing(self) -> list[tuple[str, str]]:
        return [pair for pair in self.expected if self.runs[pair] == 0]

    @property
    def applied_once(self) -> int:
        return sum(1 for n in self.applies.values() if n == 1)

    @property
    def apps(self) -> int:
        return len(self.expected) // len(STEPS)

    @property
    def batch_done(self) -> bool:
        return self.batch_completed == self.batch_total == self.apps

    @property
    def ok(self) -> bool:
        """The batch completed, every step ran once, every app was changed once."""
        steps_once = self.once == len(self.expected) and not self.repeated
        return (
            self.batch_done and steps_once and self.applied_once == len(self.applies) == self.apps
        )


def verify(files: DemoFiles, batch: str, apps: int, snapshot: KillSnapshot) -> Verdict:
    """Count each step's runs from the step log, and each app's applies from the ledger."""
    entries = StepLog(files.step_log).entries()
    store = open_store(files.store_url)
    try:
        counts = store.batch_counts(batch)
        op_calls = {op.key: op.calls for op in store.list_operations(prefix=f"{batch}/")}
    finally:
        store.close()
    expected = [(f"{batch}/{app_id}", step) for app_id in app_ids(apps) for step in STEPS]
    return Verdict(
        batch_total=sum(counts.values()),
        batch_completed=counts.get("completed", 0),
        runs=Counter(entries),
        run1_by_step=Counter(step for _, step in entries[: snapshot.steps_logged]),
        run2_by_step=Counter(step for _, step in entries[snapshot.steps_logged :]),
        applies=applies_per_app(files.ledger),
        expected=expected,
        op_calls=op_calls,
    )
