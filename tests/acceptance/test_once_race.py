"""Two processes race on the same operation keys; each key's function runs once.

Both processes run the script below against one store (a SQLite file, then a
PostgreSQL database, where the claims meet in group commit), in different
batches ("a" and "b"), so each has its own 30 tasks; task ``t`` of either batch
calls ``ctx.once`` on keys ``k/10t`` .. ``k/10t+9``, the same keys in the same
order, so the two collide on nearly every key. The function appends
``key pid`` to a counts file: one line per real call. A start barrier (a "go"
file) releases both at the same moment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn import op_key
from cairn.store import Store, admin, open_store
from cairn.store.records import StepRecord
from tests.servers import wait_until

pytestmark = pytest.mark.acceptance

TASKS = 30
KEYS_PER_TASK = 10
ALL_KEYS = {op_key("k", i) for i in range(TASKS * KEYS_PER_TASK)}
RUN_TIMEOUT_SECONDS = 60
BATCHES = ("a", "b")

RACE_SCRIPT = '''\
"""One racer: run batch BATCH, whose tasks call ctx.once on the shared keys."""
import json
import os
import sys
import time
from pathlib import Path

from cairn import Cairn, op_key

store, batch, counts, ready, go = sys.argv[1:6]
TASKS, KEYS_PER_TASK = {tasks}, {keys_per_task}
# A short poll: a key claimed by the other live process is waited for.
app = Cairn(store, poll_interval=0.005)


def act(key, pid):
    time.sleep(0.002)  # real-sleep-ok: the outside call takes a moment
    fd = os.open(counts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{{key}} {{pid}}\\n".encode())  # one O_APPEND write per call
    finally:
        os.close(fd)
    return f"{{key}}@{{pid}}"


@app.task(name="race")
def race(ctx, t):
    keys = [op_key("k", t * KEYS_PER_TASK + j) for j in range(KEYS_PER_TASK)]
    return [ctx.once(key, act, os.getpid()) for key in keys]


with app:
    app.enqueue(batch, race, [{{"t": t}} for t in range(TASKS)])
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.001)  # real-sleep-ok: the start barrier
    report = app.run_batch(batch, race, concurrency=3, progress=False)
print(json.dumps({{"ok": report.ok, "pid": os.getpid(), "counts": report.counts}}))
'''


@dataclass(frozen=True)
class Racer:
    batch: str
    process: subprocess.Popen[str]
    ready: Path


def start_racer(tmp_path: Path, script: Path, batch: str, store: str) -> Racer:
    ready = tmp_path / f"ready-{batch}"
    command = [
        sys.executable,
        str(script),
        store,
        batch,
        str(tmp_path / "counts.txt"),
        str(ready),
        str(tmp_path / "go"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return Racer(batch, process, ready)


def release_together(go: Path, racers: list[Racer]) -> None:
    """Wait until every racer is set up and waiting, then let them all go."""

    def all_waiting() -> bool:
        for racer in racers:
            if racer.process.poll() is not None:
                pytest.fail(f"racer {racer.batch} died early:\n{racer.process.communicate()[1]}")
        return all(racer.ready.exists() for racer in racers)

    assert wait_until(all_waiting, RUN_TIMEOUT_SECONDS), "the racers never got ready"
    go.touch()


def finish(racer: Racer) -> dict[str, object]:
    stdout, stderr = racer.process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    assert racer.process.returncode == 0, f"racer {racer.batch} failed:\n{stderr}"
    summary: dict[str, object] = json.loads(stdout)
    return summary


def read_calls(path: Path) -> list[tuple[str, int]]:
    lines = path.read_text().splitlines()
    return [(key, int(pid)) for key, pid in (line.split(" ") for line in lines)]


def op_entries(history: dict[int, StepRecord]) -> dict[str, StepRecord]:
    return {row.name: row for row in history.values() if row.kind == "op"}


def failed_tasks(store: Store, batch: str) -> dict[str, str]:
    """Each failed task's recorded error type and message, for assertion messages."""
    failed = {}
    for task in admin(store).list_tasks(batch=batch, status="failed"):
        error = json.loads(task.error or "{}")
        failed[task.id] = f"{error.get('type')}: {error.get('message', '')[:160]}"
    return failed


def assert_both_batches_completed(store: Store) -> None:
    for batch in BATCHES:
        counts = dict(store.batch_counts(batch))
        assert counts == {"completed": TASKS}, (counts, failed_tasks(store, batch))


def assert_results_agree(store: Store, t: int, caller_pid: dict[str, int]) -> None:
    """Tasks ``a/t=T`` and ``b/t=T`` returned the same value per key: the one
    made by the process that called the key's function."""
    task_a, task_b = (store.get_task(f"{batch}/t={t}") for batch in BATCHES)
    assert task_a is not None
    assert task_b is not None
    results = [json.loads(task.result or "null") for task in (task_a, task_b)]
    assert results[0] == results[1]
    keys = [op_key("k", t * KEYS_PER_TASK + j) for j in range(KEYS_PER_TASK)]
    assert results[0] == [f"{key}@{caller_pid[key]}" for key in keys]


def assert_audit_trail(store: Store, t: int, caller_pid: dict[str, int], pid_a: int) -> None:
    """Each key's row names the task that called it; that task's history
    records one call, the other task's history an adopted result (0 calls)."""
    ids = [f"{batch}/t={t}" for batch in BATCHES]
    entries = {task_id: op_entries(store.load_history(task_id)) for task_id in ids}
    for j in range(KEYS_PER_TASK):
        key = op_key("k", t * KEYS_PER_TASK + j)
        op = store.get_operation("", key)
        assert op is not None
        assert (op.status, op.calls) == ("completed", 1)
        caller = op.task_id
        adopter = ids[1] if caller == ids[0] else ids[0]
        assert caller.startswith("a/") == (caller_pid[key] == pid_a)
        assert (entries[caller][key].attempts, entries[adopter][key].attempts) == (1, 0)


def test_two_processes_racing_on_the_same_keys_call_each_key_once(
    store_url: str, tmp_path: Path
) -> None:
    """Two processes released together, each running 30 tasks over the same 300
    keys, call each key's function exactly once in total; both batches complete,
    and the two tasks that share keys return the same result for each key. Each
    process wins some keys. Each key's row names the task that called it, whose
    history records one call, while the other task's history records that it
    adopted the result without calling."""
    script = tmp_path / "racer.py"
    script.write_text(RACE_SCRIPT.format(tasks=TASKS, keys_per_task=KEYS_PER_TASK))
    racers = [start_racer(tmp_path, script, batch, store_url) for batch in BATCHES]
    release_together(tmp_path / "go", racers)
    summaries = {racer.batch: finish(racer) for racer in racers}
    pids = {batch: int(str(summary["pid"])) for batch, summary in summaries.items()}

    calls = read_calls(tmp_path / "counts.txt")
    assert Counter(key for key, _ in calls) == dict.fromkeys(ALL_KEYS, 1)
    caller_pid = dict(calls)
    wins = Counter(caller_pid.values())
    print(f"\nkeys won: a={wins[pids['a']]} b={wins[pids['b']]}")
    assert set(wins) == set(pids.values()), f"no race: one process won every key {wins}"

    store = open_store(store_url)
    try:
        assert_both_batches_completed(store)
        assert {op.key for op in store.list_operations(prefix="k/")} == ALL_KEYS
        assert store.operation_call_counts() == (0, len(ALL_KEYS))
        for t in range(TASKS):
            assert_results_agree(store, t, caller_pid)
            assert_audit_trail(store, t, caller_pid, pids["a"])
    finally:
        store.close()
