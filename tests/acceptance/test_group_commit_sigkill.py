"""Group commit under SIGKILL: no step is reported done before its row is
durable, nothing is lost and nothing reported done runs again.

``groupcommit_script.py`` runs a batch of tasks all at once (async tasks on
one event loop, or sync tasks on as many threads), so their step writes share
commits. Each step's effect is a POST to the test's own server, and right after
a step returns to its task, the task tells the server so. On the Nth such
"done", the server SIGKILLs the process before answering: the step has just
returned, and its row must already be in the store. A second run finishes the
batch; the server's counts then say that every step's effect happened, and
that none reported done happened twice (only a step caught between its effect
and its commit may run again, at most one per task).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from cairn.store import open_store
from cairn.testing.servers import LocalServer

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("groupcommit_script.py")
TASKS = 12
STEPS = 8
KILL_AT = 40  # the "done" that triggers the kill: well inside the batch's 96
RUN_TIMEOUT_SECONDS = 60


class CountingServer(LocalServer):
    """Counts each step's effects and "done" reports; SIGKILLs the reporting
    process on the ``kill_at``-th "done", before answering it."""

    def __init__(self, kill_at: int | None) -> None:
        super().__init__()
        self.kill_at = kill_at
        self.effects: Counter[tuple[str, int]] = Counter()
        # Each effect with the process that made it: which happened before the
        # kill is told by the sender, not by when its count was read (a killed
        # process's last request may be counted after the test reads the counts).
        self.effects_by: list[tuple[tuple[str, int], str]] = []
        self.done: list[tuple[str, int]] = []
        self.killed = threading.Event()
        self.killed_pid = ""

    def answer(self, request: Any, method: str) -> None:
        request.read_body()
        _, kind, task, prefix, seq = request.path.split("/", 4)
        key = (f"{task}/{prefix}", int(seq))
        with self._lock:
            if kind == "seen":
                request.send_json(HTTPStatus.OK, {"seen": self.effects[key] > 0})
                return
            if kind == "effect":
                self.effects[key] += 1
                self.effects_by.append((key, request.headers["X-Pid"]))
            else:
                self.done.append(key)
                if len(self.done) == self.kill_at and not self.killed.is_set():
                    self.killed_pid = request.headers["X-Pid"]
                    os.kill(int(self.killed_pid), signal.SIGKILL)
                    self.killed.set()
                    return  # the client is dead: no answer
        request.send_json(HTTPStatus.OK, {"ok": True})


def run_script(store_url: str, server: CountingServer, mode: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), store_url, server.url, mode, str(TASKS), str(STEPS)],
        env=env,
        timeout=RUN_TIMEOUT_SECONDS,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        pytest.fail(f"the batch script failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.returncode


@pytest.mark.parametrize("mode", ["async", "threads"])
def test_sigkill_right_after_a_step_returns_finds_its_row(store_url: str, mode: str) -> None:
    """SIGKILL right after the Nth step returned (group commit on): every step
    reported done is in the store; the restart completes the batch, every
    step's effect happened, and none reported done happened again."""
    with CountingServer(kill_at=KILL_AT) as server:
        assert run_script(store_url, server, mode) == -signal.SIGKILL
        assert server.killed.is_set()
        reported = list(server.done)
        store = open_store(store_url)
        try:
            for task_id, i in reported:
                row = store.load_history(task_id).get(i + 1)
                assert row is not None, f"{task_id} step {i} was reported done but is not stored"
                assert row.status == "completed"
        finally:
            store.close()
        server.kill_at = None
        assert run_script(store_url, server, mode) == 0
        effects = server.effects
        effects_before = Counter(k for k, pid in server.effects_by if pid == server.killed_pid)
    every_step = {(f"gc/n={n}", i) for n in range(TASKS) for i in range(STEPS)}
    assert set(effects) == every_step  # nothing lost
    doubled = {key for key, count in effects.items() if count > 1}
    assert not doubled & set(reported)  # nothing reported done ran again
    assert all(effects[key] == 2 for key in doubled)
    assert len(doubled) <= TASKS  # one in-flight step per task at most
    assert all(effects_before[key] == 1 for key in doubled)
    store = open_store(store_url)
    try:
        counts = store.batch_counts("gc")
        assert counts == {"completed": TASKS}
        for n in range(TASKS):
            history = store.load_history(f"gc/n={n}")
            assert [history[i + 1].output for i in range(STEPS)] == [
                str(n * 100 + i) for i in range(STEPS)
            ]
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["async", "threads"])
def test_sigkill_right_after_a_once_returns_finds_it_completed(store_url: str, mode: str) -> None:
    """SIGKILL right after the Nth ``ctx.once`` returned (its claim and its
    record grouped with other tasks'): every operation reported done is
    completed in the store with its result; the restart completes the batch,
    and the server saw every operation's effect exactly once (a claim caught
    in flight is reconciled with the server, never called twice)."""
    with CountingServer(kill_at=KILL_AT) as server:
        assert run_script(store_url, server, f"once-{mode}") == -signal.SIGKILL
        assert server.killed.is_set()
        reported = list(server.done)
        store = open_store(store_url)
        try:
            for task_id, i in reported:
                op = store.get_operation("", f"{task_id}/{i}")
                assert op is not None, f"{task_id} operation {i} was reported done, not stored"
                assert op.status == "completed"
                assert op.result == str(int(task_id.rsplit("=", 1)[1]) * 100 + i)
        finally:
            store.close()
        server.kill_at = None
        assert run_script(store_url, server, f"once-{mode}") == 0
        effects = Counter(server.effects)
    every_op = {(f"gc/n={n}", i) for n in range(TASKS) for i in range(STEPS)}
    assert effects == dict.fromkeys(every_op, 1)  # nothing lost, nothing twice
    store = open_store(store_url)
    try:
        assert store.batch_counts("gc") == {"completed": TASKS}
        for n in range(TASKS):
            for i in range(STEPS):
                op = store.get_operation("", f"gc/n={n}/{i}")
                assert op is not None
                assert (op.status, op.result) == ("completed", str(n * 100 + i))
    finally:
        store.close()


@pytest.mark.parametrize("mode", ["async", "threads"])
def test_sigkill_right_after_a_message_is_appended_finds_it(store_url: str, mode: str) -> None:
    """SIGKILL right after the Nth conversation message was appended (grouped
    with other tasks' writes): every message reported done is stored; after
    the restart each task's conversation holds each of its messages once, in
    order, and no step reported done ran again."""
    with CountingServer(kill_at=KILL_AT) as server:
        assert run_script(store_url, server, f"conv-{mode}") == -signal.SIGKILL
        assert server.killed.is_set()
        reported = list(server.done)
        store = open_store(store_url)
        try:
            for task_id, i in reported:
                n = int(task_id.rsplit("=", 1)[1])
                [row] = store.load_messages(task_id, "main", i, 1)
                assert (row.idx, json.loads(row.content)["content"]) == (i, f"{n}-{i}")
        finally:
            store.close()
        server.kill_at = None
        assert run_script(store_url, server, f"conv-{mode}") == 0
        effects = Counter(server.effects)
    every_step = {(f"gc/n={n}", i) for n in range(TASKS) for i in range(STEPS)}
    assert set(effects) == every_step
    doubled = {key for key, count in effects.items() if count > 1}
    assert not doubled & set(reported)
    assert len(doubled) <= TASKS
    store = open_store(store_url)
    try:
        assert store.batch_counts("gc") == {"completed": TASKS}
        for n in range(TASKS):
            stored = store.load_messages(f"gc/n={n}", "main", 0, STEPS + 5)
            assert [(m.idx, json.loads(m.content)["content"]) for m in stored] == [
                (i, f"{n}-{i}") for i in range(STEPS)
            ]
    finally:
        store.close()
