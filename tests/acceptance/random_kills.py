"""SIGKILL at seeded random moments, for the integrations' random-kill tests.

Named kill points re-test the windows already known; random moments find the
ones nobody named (the LangGraph one between a step's writes and its
checkpoint was found that way). Each kill here waits until the model server
of the test has seen a randomly drawn number of requests, then a random
fraction of a second more, so it lands anywhere: inside a model request, a
tool, a checkpoint or session write, the startup. The draws come from
``random.Random(seed)``: ``CAIRN_TEST_KILL_SEED`` picks the seed (default 1),
so a failure is rerun with the same kill plan. Every wait is bounded, so a run
ends in bounded time whatever happens.

What the tests assert does not depend on where the kills landed: at most the
step in flight at each kill runs again, counted at servers of the test's own
(the model server, and ``ToolServer``, which every tool run posts to).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cairn.testing.servers import WebhookServer, wait_until

# The longest wait for a drawn request count (a loaded machine is slow, never
# this slow); and how far past it, at most, a kill lands.
WAIT_SECONDS = 90.0
JITTER_SECONDS = 0.05
KILL_SEED_ENV = "CAIRN_TEST_KILL_SEED"

# The child side: a tool run posts its argument here before it does its work
# (so a run cut short by a kill is counted too). Pasted into the CHILD scripts.
POST_TOOL_RUN = """
import os, urllib.request

def post_tool_run(name):
    request = urllib.request.Request(os.environ["CAIRN_TEST_TOOL_URL"], data=name.encode(),
                                     method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
"""


class ToolServer(WebhookServer):
    """Counts tool runs: one POST per run, its body the tool's argument."""

    def runs(self) -> Counter[str]:
        return Counter(post.body.decode() for post in self.posts)


@dataclass(frozen=True)
class Kill:
    """Kill once the model server has seen ``requests`` requests, ``after``
    seconds later."""

    requests: int
    after: float


def seed() -> int:
    return int(os.environ.get(KILL_SEED_ENV, "1"))


def kill_plan(requests: int, kills: int, rng: random.Random) -> list[Kill]:
    """``kills`` kills at distinct request counts below ``requests`` (a clean
    run's total), in order, each with a random delay."""
    counts = sorted(rng.sample(range(1, requests), kills))
    return [Kill(count, rng.uniform(0.0, JITTER_SECONDS)) for count in counts]


def kill_at_random(
    plan: list[Kill], start: Callable[[], subprocess.Popen[str]], requests: Callable[[], int]
) -> int:
    """Start the run once per planned kill and SIGKILL it at its moment (a run
    that ends first is not killed). Returns how many runs were killed."""
    killed = 0
    codes: list[int] = []
    for kill in plan:
        process = start()
        wait_until(
            lambda: requests() >= kill.requests or process.poll() is not None,  # noqa: B023
            WAIT_SECONDS,
        )
        time.sleep(kill.after)  # real-sleep-ok: the random moment, past the drawn count
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=WAIT_SECONDS)
        killed += process.returncode == -signal.SIGKILL
        codes.append(process.returncode)
    _note(plan, codes)
    return killed


def _note(plan: list[Kill], codes: list[int]) -> None:
    """With ``CAIRN_TEST_KILL_LOG`` set, append the seed, plan and kills made
    there, to see where repeated runs landed."""
    log = os.environ.get("CAIRN_TEST_KILL_LOG")
    if log:
        with Path(log).open("a") as out:
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
            out.write(f"{test} seed={seed()} plan={[k.requests for k in plan]} exits={codes}\n")
