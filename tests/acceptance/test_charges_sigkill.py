"""A batch that charges a payment API, SIGKILLed many times, never charges twice.

``charge_script.py`` runs the batch in a subprocess; the ``PaymentServer`` runs
in this test process, so its count of real charges survives every kill. After
each kill the store is read: an operation left ``claimed`` is a claim whose run
died between claiming the key and recording the answer (the window in which
cairn cannot know whether the charge happened). Those are the only keys that
may ever be called again, and only as their policy allows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn.store import Store, admin, open_store
from cairn.store.records import OperationRecord, TaskRecord
from tests.acceptance.charge_script import BATCH, item_name, pay_key, task_id
from tests.servers import PaymentServer

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("charge_script.py")
ITEMS = 60
CONCURRENCY = 4
KILLS = 12
# Time between a charge being made and its answer: where most kills in the
# claim -> record window land.
SERVER_DELAY_SECONDS = 0.02
RUN_TIMEOUT_SECONDS = 60
IN_DOUBT_TYPE = "cairn.errors.InDoubtOperation"
# The run that kills itself in the window, so the in-doubt case always happens.
SELF_KILLED_ITEM = item_name(5)
ALL_ITEMS = [item_name(i) for i in range(ITEMS)]


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


@dataclass
class KillLog:
    """What the kills did: ``dead_claims[key]`` holds the claim numbers
    (``calls`` values) that were left ``claimed`` by a killed run."""

    kills: int = 0
    finished_early: int = 0
    dead_claims: dict[str, set[int]] = field(default_factory=dict)

    @property
    def dead_claim_count(self) -> int:
        return sum(len(claims) for claims in self.dead_claims.values())


@dataclass(frozen=True)
class Batch:
    store: Path
    server: PaymentServer
    policy: str


@contextmanager
def opened(path: Path) -> Iterator[Store]:
    store = open_store(str(path))
    try:
        yield store
    finally:
        store.close()


def start(batch: Batch, *extra: str, items: int = ITEMS) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        str(SCRIPT),
        f"--store={batch.store}",
        f"--server={batch.server.url}",
        f"--policy={batch.policy}",
        f"--items={items}",
        f"--concurrency={CONCURRENCY}",
        *extra,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str]) -> Finished:
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    return Finished(process.returncode, stdout, stderr)


def run(batch: Batch, *extra: str, items: int = ITEMS) -> Finished:
    return finish(start(batch, *extra, items=items))


def note_dead_claims(batch: Batch, log: KillLog) -> None:
    """After a kill: every key still ``claimed`` was claimed by the dead run."""
    with opened(batch.store) as store:
        for op in admin(store).list_operations(statuses=("claimed",)):
            log.dead_claims.setdefault(op.key, set()).add(op.calls)


def wait_for_requests_or_exit(
    server: PaymentServer, process: subprocess.Popen[str], at_least: int
) -> bool:
    """True once the server has seen ``at_least`` charge requests; False if the
    batch exited first (it had nothing left to charge)."""
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while not server.wait_for_requests(at_least, timeout=0.05):
        if process.poll() is not None:
            return False
        if time.monotonic() > deadline:
            pytest.fail(f"the payment server never saw {at_least} requests")
    return True


def kill_at_random_moment(batch: Batch, rng: random.Random, log: KillLog) -> bool:
    """Run the batch and SIGKILL it either right after the server has seen 1-3
    more charge requests, or 0-60 ms after its first one (long enough for a few
    more charges, short enough to leave work for the next kills). False if it
    finished before the kill."""
    seen = batch.server.requests
    by_requests = rng.random() < 0.5
    threshold = seen + (rng.randint(1, 3) if by_requests else 1)
    delay = 0.0 if by_requests else rng.uniform(0.0, 0.06)
    process = start(batch)
    if wait_for_requests_or_exit(batch.server, process, threshold):
        if delay:
            time.sleep(delay)  # real-sleep-ok: waiting on a real subprocess
        os.kill(process.pid, signal.SIGKILL)
    result = finish(process)
    if not result.killed:
        log.finished_early += 1
        return False
    log.kills += 1
    note_dead_claims(batch, log)
    return True


def kill_many_times(batch: Batch, seed: int) -> KillLog:
    """One run that kills itself after charging an item (so one claim surely
    dies in the window), then KILLS kills at seeded random moments."""
    log = KillLog()
    first = run(batch, f"--kill-after-claim={SELF_KILLED_ITEM}", "--kill-point=after_act")
    assert first.killed, f"the self-kill did not fire ({first.returncode}):\n{first.stderr}"
    log.kills += 1
    note_dead_claims(batch, log)
    assert log.dead_claims.get(pay_key(SELF_KILLED_ITEM)) == {1}
    rng = random.Random(seed)
    for _ in range(KILLS):
        if not kill_at_random_moment(batch, rng, log):
            break
    return log


def tasks_by_item(store: Store) -> dict[str, TaskRecord]:
    return {task.id: task for task in admin(store).list_tasks(batch=BATCH)}


def ops_by_key(store: Store) -> dict[str, OperationRecord]:
    return {op.key: op for op in admin(store).list_operations(prefix="pay/")}


def error_type(task: TaskRecord) -> str | None:
    return None if task.error is None else str(json.loads(task.error)["type"])


def report(policy: str, log: KillLog, ops: dict[str, OperationRecord], in_doubt: int = 0) -> None:
    """Print what the kills did (shown with ``pytest -s``)."""
    redundant = sum(1 for op in ops.values() if op.calls > 1)
    print(
        f"\n[{policy}] kills={log.kills} finished_early={log.finished_early} "
        f"dead_claims={log.dead_claim_count} keys_hit={len(log.dead_claims)} "
        f"redundant_executions={redundant} in_doubt={in_doubt}"
    )


def assert_all_completed(batch: Batch, final: Finished) -> None:
    assert final.returncode == 0, f"final run failed ({final.returncode}):\n{final.stderr}"
    with opened(batch.store) as store:
        assert dict(store.batch_counts(BATCH)) == {"completed": ITEMS}


# -- the three policies under random kills ---------------------------------------------


def test_reconcile_charges_every_item_exactly_once_across_sigkills(tmp_path: Path) -> None:
    """policy reconcile, server NOT deduping: killed 13 times (once surely
    between charging and recording), the batch completes and every item is
    charged exactly once. A key whose claim died is settled by asking the API:
    the server receives exactly one charge request per key, so reconcile found
    every charge that had happened and re-sent only those that had not."""
    with PaymentServer(honor_keys=False, delay=SERVER_DELAY_SECONDS) as server:
        batch = Batch(tmp_path / "charges.db", server, "reconcile")
        log = kill_many_times(batch, seed=3101)
        final = run(batch)
        assert_all_completed(batch, final)
        assert server.charges_by_item() == dict.fromkeys(ALL_ITEMS, 1)
        assert server.requests_by_key() == {pay_key(item): 1 for item in ALL_ITEMS}
        with opened(batch.store) as store:
            ops = ops_by_key(store)
        assert {op.status for op in ops.values()} == {"completed"}
        for key, op in ops.items():
            died = log.dead_claims.get(key, set())
            assert died == set(range(1, len(died) + 1)), key  # claims numbered 1, 2, ...
            # The last dead claim is called again only if the API had not charged it.
            expected_calls = {len(died), len(died) + 1} if died else {1}
            assert op.calls in expected_calls, key
        # Killed after charging: reconcile found the charge, so no second call.
        assert ops[pay_key(SELF_KILLED_ITEM)].calls == 1
        report("reconcile", log, ops)
        assert log.kills >= KILLS // 2


def test_retry_resends_with_the_same_key_only_where_a_claim_died(tmp_path: Path) -> None:
    """policy retry, server deduping on Idempotency-Key: killed 13 times, the
    batch completes and every item is charged exactly once. An operation row's
    ``calls`` is 1 plus the number of its claims that a kill left in the claim
    -> record window; every other key was called exactly once, so redundant
    executions happen only where a kill hit that window."""
    with PaymentServer(honor_keys=True, delay=SERVER_DELAY_SECONDS) as server:
        batch = Batch(tmp_path / "charges.db", server, "retry")
        log = kill_many_times(batch, seed=3202)
        final = run(batch)
        assert_all_completed(batch, final)
        assert server.charges_by_item() == dict.fromkeys(ALL_ITEMS, 1)
        with opened(batch.store) as store:
            ops = ops_by_key(store)
        assert {op.status for op in ops.values()} == {"completed"}
        requests = server.requests_by_key()
        for key, op in ops.items():
            died = log.dead_claims.get(key, set())
            assert op.calls == len(died) + 1, key
            assert died == set(range(1, op.calls)), key
            assert 1 <= requests[key] <= op.calls, key
        redundant = {key for key, op in ops.items() if op.calls > 1}
        assert redundant == set(log.dead_claims)
        assert pay_key(SELF_KILLED_ITEM) in redundant
        report("retry", log, ops)
        assert log.kills >= KILLS // 2


def test_raise_never_charges_twice_and_surfaces_every_doubt(tmp_path: Path) -> None:
    """policy raise, server NOT deduping (a second call would be a second
    charge): killed 13 times, no item is ever charged twice, because cairn never
    calls a key's function again once a claim of it died. Every key a kill left
    in the claim -> record window ends ``in_doubt`` and its task failed with
    InDoubtOperation; every other task completed, charged exactly once with one
    call. Nothing is left running, pending or ``claimed``."""
    with PaymentServer(honor_keys=False, delay=SERVER_DELAY_SECONDS) as server:
        batch = Batch(tmp_path / "charges.db", server, "raise")
        log = kill_many_times(batch, seed=3303)
        final = run(batch)
        assert final.returncode == 1, final.stderr  # not ok: some tasks are in doubt
        charges = server.charges_by_item()
        assert all(n == 1 for n in charges.values()), charges
        assert all(n == 1 for n in server.requests_by_key().values())
        with opened(batch.store) as store:
            tasks = tasks_by_item(store)
            ops = ops_by_key(store)
            in_doubt = {op.key for op in admin(store).list_operations(statuses=("in_doubt",))}
        assert in_doubt == set(log.dead_claims)
        assert pay_key(SELF_KILLED_ITEM) in in_doubt
        assert charges.get(SELF_KILLED_ITEM) == 1  # it was charged before the kill
        for item in ALL_ITEMS:
            task, op = tasks[task_id(item)], ops.get(pay_key(item))
            if pay_key(item) in in_doubt:
                assert (task.status, error_type(task)) == ("failed", IN_DOUBT_TYPE), item
            else:
                assert task.status == "completed", (item, task.status, task.error)
                assert op is not None, item
                assert (op.status, op.calls) == ("completed", 1), item
                assert charges.get(item) == 1, item
        report("raise", log, ops, in_doubt=len(in_doubt))
        assert log.kills >= KILLS // 2


# -- one exact kill per policy and point -------------------------------------------------

EXACT_ITEMS = 2
EXACT_ITEM = item_name(1)

# The random-kill tests above start with a kill at ``after_act`` (charged, answer
# not recorded); these cover ``after_claim`` (key claimed, nothing sent yet).
# policy -> (task status, op status, op calls, charges of the item)
AFTER_CLAIM_OUTCOMES = {
    "reconcile": ("completed", "completed", 2, 1),
    "retry": ("completed", "completed", 2, 1),
    "raise": ("failed", "in_doubt", 1, 0),
}


@pytest.mark.parametrize("policy", list(AFTER_CLAIM_OUTCOMES))
def test_a_kill_after_claiming_before_charging_ends_as_the_policy_says(
    tmp_path: Path, policy: str
) -> None:
    """Killed at ``after_claim`` (the key is claimed, the charge not sent), the
    restarted batch settles the key as its policy says: reconcile asks the API,
    learns nothing was charged and charges once; retry sends with the same key
    and charges once; raise fails the task with InDoubtOperation and never calls
    at all, though nothing was charged: cairn cannot know that by itself. The
    server does not dedupe except under retry, so a double call would show."""
    with PaymentServer(honor_keys=policy == "retry") as server:
        batch = Batch(tmp_path / "charges.db", server, policy)
        first = run(
            batch, f"--kill-after-claim={EXACT_ITEM}", "--kill-point=after_claim", items=EXACT_ITEMS
        )
        assert first.killed, first.stderr
        assert EXACT_ITEM not in server.charges_by_item()
        second = run(batch, items=EXACT_ITEMS)
        assert second.returncode == (1 if policy == "raise" else 0), second.stderr
        with opened(batch.store) as store:
            task = tasks_by_item(store)[task_id(EXACT_ITEM)]
            op = ops_by_key(store)[pay_key(EXACT_ITEM)]
        task_status, op_status, calls, charged = AFTER_CLAIM_OUTCOMES[policy]
        assert (task.status, op.status, op.calls) == (task_status, op_status, calls)
        assert server.charges_by_item().get(EXACT_ITEM, 0) == charged
        assert server.requests_by_key().get(pay_key(EXACT_ITEM), 0) == charged
        if task_status == "failed":
            assert error_type(task) == IN_DOUBT_TYPE
