"""Token limits across real ``cairn worker`` processes, and budgets from the CLI.

The simulated model server runs in this test process, capped at a TPM and an
RPM the test sets, counting in its own sliding window (``Throttle``); the app
(``token_limits_app``) declares the same caps as a ``TokenRate``. Workers on
PostgreSQL are 8 processes, on SQLite one process of 8 threads.

* The 60-second tests check, on the server's own log, that no window held more
  than the caps and that no request was answered 429.
* The kill test SIGKILLs a worker while its call is at the server (the server
  holds its answer): the dead holder's reservation comes back when its lease
  runs out (plus the window, as any ended call's), and another worker finishes
  the work, with the caps kept throughout.
* The budget test runs a batch whose ``Budget(usd=...)`` is below what it
  needs: the workers leave its tasks parked, no call past the budget reaches
  the server, one alert is logged, and after ``cairn budget --raise`` the batch
  completes with a spend equal to the server-measured cost within 1%.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Budget
from cairn.agent.simulate import SimulatedModelServer
from cairn.store import open_store
from tests.acceptance.token_limits_app import MODEL, PRICES, make_app
from tests.servers import wait_until

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_SECONDS = 400
REPLY = " ".join(f"point{i}" for i in range(30)) + "."


def reply(request: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": REPLY}


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every worker a test starts; any still alive at the end is killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def cli(*arguments: str) -> list[str]:
    """The command line of ``cairn ARGUMENTS`` with this interpreter."""
    return [sys.executable, "-c", "from cairn.cli import main; main()", *arguments]


def start_worker(
    started: list[subprocess.Popen[bytes]],
    store: str,
    log: Path,
    env: dict[str, str],
    *,
    concurrency: int,
) -> subprocess.Popen[bytes]:
    """``cairn worker --burst`` on the token-limits app: runs until nothing is left."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    command = cli(
        "worker",
        "tests.acceptance.token_limits_app:app",
        "--burst",
        f"--concurrency={concurrency}",
        "--idle-wait=0.2",
        f"--store={store}",
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=base | env, stdout=out, stderr=subprocess.STDOUT
        )
    started.append(process)
    return process


def finish(process: subprocess.Popen[bytes], log: Path) -> None:
    try:
        code = process.wait(RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"worker did not finish:\n{log.read_text(errors='replace')[-3000:]}")
    assert code == 0, log.read_text(errors="replace")[-3000:]


def enqueue(store: str, batch: str, count: int, budget: Budget | None = None) -> None:
    created, agent = make_app(store)
    with created:
        created.enqueue(batch, agent, [{"n": n} for n in range(count)], budget=budget)


def statuses(store: str, batch: str) -> dict[str, int]:
    opened = open_store(store)
    try:
        found: dict[str, int] = {}
        for task in opened.list_tasks(batch=batch):
            found[task.status] = found.get(task.status, 0) + 1
        return found
    finally:
        opened.close()


def run_workers(
    workers: list[subprocess.Popen[bytes]],
    store: str,
    tmp_path: Path,
    env: dict[str, str],
    processes: int,
    concurrency: int,
) -> None:
    procs = [
        start_worker(workers, store, tmp_path / f"w{i}.log", env, concurrency=concurrency)
        for i in range(processes)
    ]
    for i, process in enumerate(procs):
        finish(process, tmp_path / f"w{i}.log")


# -- the caps, over 60-second windows ------------------------------------------------------
TPM = 6000
RPM = 60
AGENTS = 40


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("backend", "processes", "concurrency"), [("postgres", 8, 2), ("sqlite", 1, 8)]
)
def test_workers_never_pass_the_providers_tpm_and_rpm(
    backend: str,
    processes: int,
    concurrency: int,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    """40 agents of 2 calls (about 8,000 tokens in all) against a server capped
    at 6,000 tokens and 60 requests a minute, the same TokenRate declared:
    every call is answered once, no 60-second window of the server's log holds
    more than either cap, and no request is answered 429. Prints how much of
    the token cap the busiest window used."""
    if backend == "postgres":
        store = str(request.getfixturevalue("pg_url"))
    else:
        store = f"sqlite:///{tmp_path / 'cairn.db'}"
    enqueue(store, "tpm", AGENTS)
    with SimulatedModelServer(
        reply, tokens_per_window=TPM, requests_per_window=RPM, window=60.0
    ) as server:
        env = {
            "CAIRN_TEST_MODEL_URL": server.base_url,
            "CAIRN_TEST_TPM": str(TPM),
            "CAIRN_TEST_RPM": str(RPM),
            "CAIRN_TEST_WINDOW": "60",
        }
        run_workers(workers, store, tmp_path, env, processes, concurrency)
        tokens, requests = server.throttle.busiest()
        refused = server.throttle.refused
        answered = len(server.throttle.answered)
    print(f"\n{backend}: busiest window {tokens} tokens ({tokens / TPM:.1%} of the TPM), "
          f"{requests} requests; {answered} answered, {refused} refused")  # fmt: skip
    assert statuses(store, "tpm") == {"completed": AGENTS}
    assert answered == 2 * AGENTS
    assert refused == 0
    assert tokens <= TPM
    assert requests <= RPM


# -- a SIGKILLed holder ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_sigkilled_workers_reservation_comes_back_with_its_lease(
    pg_url: str, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """The cap (150 tokens in 3 s) has room for one call at a time (each
    reserves about 90: its prompt plus max_tokens=60). A worker is
    SIGKILLed while its call is at the server (the server holds the answer):
    its reservation keeps the limit full until its lease (2 s) has run out and
    the window after it has passed, then another worker takes it and finishes
    all 3 agents; the killed call reaches the server again, and no window of
    the server's log ever holds more than the cap, nor any 429."""
    enqueue(pg_url, "kill", 3)
    held = threading.Event()
    release = threading.Event()

    def holding(request: dict[str, Any]) -> dict[str, Any]:
        if not held.is_set():
            held.set()
            release.wait(60)
        return reply(request)

    with SimulatedModelServer(
        holding, tokens_per_window=150, requests_per_window=10, window=3.0
    ) as server:
        env = {
            "CAIRN_TEST_MODEL_URL": server.base_url,
            "CAIRN_TEST_TPM": "150",
            "CAIRN_TEST_RPM": "10",
            "CAIRN_TEST_WINDOW": "3",
            "CAIRN_TEST_LEASE": "2",
            "CAIRN_TEST_TURNS": "1",
        }
        victim = start_worker(workers, pg_url, tmp_path / "victim.log", env, concurrency=2)
        assert wait_until(held.is_set, RUN_TIMEOUT_SECONDS)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        release.set()  # the server answers into a closed socket, and counts it
        rescuer = start_worker(workers, pg_url, tmp_path / "rescuer.log", env, concurrency=2)
        finish(rescuer, tmp_path / "rescuer.log")
        tokens, _ = server.throttle.busiest()
        refused = server.throttle.refused
        answered = len(server.throttle.answered)
    assert statuses(pg_url, "kill") == {"completed": 3}
    assert answered == 4  # the killed call, answered after its client died, and sent again
    assert refused == 0
    assert tokens <= 150


# -- a budget ---------------------------------------------------------------------------------
def cli_run(*arguments: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    return subprocess.run(
        cli(*arguments), cwd=ROOT, env=base, capture_output=True, text=True, timeout=120
    )


def server_cost(server: SimulatedModelServer) -> float:
    price = PRICES.price_of(MODEL)
    assert price is not None
    return (server.prompt_tokens * price.input + server.completion_tokens * price.output) / 1e6


@pytest.mark.slow
def test_a_batch_over_budget_parks_and_completes_after_cairn_budget_raise(
    tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    """12 agents of 2 calls at about $0.02 a call against Budget(usd=0.25): two
    worker processes leave the batch with its unfinished tasks parked (none
    failed) and the server's measured cost within the budget; the "reached"
    alert is in their logs once; ``cairn budget --raise usd=5`` wakes them, a
    worker finishes the batch, and ``cairn cost --json`` reports a spend equal
    to the server-measured cost within 1%."""
    store = f"sqlite:///{tmp_path / 'cairn.db'}"
    enqueue(store, "spend", 12, Budget(usd=0.25))
    with SimulatedModelServer(reply) as server:
        env = {"CAIRN_TEST_MODEL_URL": server.base_url}
        run_workers(workers, store, tmp_path, env, processes=2, concurrency=3)
        parked = statuses(store, "spend")
        cost_before, requests_before = server_cost(server), server.requests
        logs = "".join((tmp_path / f"w{i}.log").read_text(errors="replace") for i in range(2))
        shown = cli_run("budget", "spend", f"--store={store}", "--json")
        raised = cli_run("budget", "spend", "--raise", "usd=5", f"--store={store}")
        finish(start_worker(workers, store, tmp_path / "after.log", env, concurrency=3),
               tmp_path / "after.log")  # fmt: skip
        cost = cli_run("cost", f"--store={store}", "--json")
        measured = server_cost(server)
    assert parked.get("failed", 0) == 0
    assert parked.get("waiting", 0) > 0
    assert cost_before <= 0.25
    assert requests_before < 24
    assert logs.count("budget 'batch:spend' reached") == 1
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "parked"
    assert raised.returncode == 0, raised.stderr
    assert "woke" in raised.stdout
    assert statuses(store, "spend") == {"completed": 12}
    assert server.requests == 24
    assert cost.returncode == 0, cost.stderr
    (budget,) = json.loads(cost.stdout)["budgets"]
    print(f"\nbudget: {requests_before} requests before the raise (${cost_before:.6f} measured "
          f"by the server, budget $0.25); spend ${budget['spent_usd']:.6f} against "
          f"${measured:.6f} measured")  # fmt: skip
    assert budget["spent_usd"] == pytest.approx(measured, rel=0.01)
    assert budget["status"] == "ok"
