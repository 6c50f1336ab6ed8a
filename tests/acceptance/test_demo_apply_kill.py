"""Acceptance: the demo's worker SIGKILLed inside ``apply``, counted at the platform.

``cairn demo --apps 120`` was seen printing "117/120 keys called once". That line
counted the claims of each operation key (the audit log's ``calls``), not what
the ad platform did. A kill that lands inside ``apply``'s call, before the
platform acts, leaves the key claimed by a dead worker; in run 2 ``reconcile``
asks the platform, finds no change, and cairn claims the key again and calls
once more: two claims, one change. A kill after the platform acted but before
cairn recorded it is reconciled instead: one claim, one change.

Both windows are hit here on purpose (the worker stops at the exact point and is
killed there, no timing), then the platform's own ledger is counted: each app's
settings are changed exactly once in both, and the demo's report says why a key
was claimed twice instead of calling it "not called once".
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cairn.demo import report
from cairn.demo.batch import DemoFiles, run_worker
from cairn.demo.check import KillSnapshot, verify
from cairn.demo.platform import applies_per_app
from cairn.store import open_store
from cairn.testing.servers import wait_until

BATCH = "ad-review-kill"
APPS = 1  # one task: no other app's apply in flight when the kill lands
# The worker: the demo's own batch, with apply stopped at one point until killed.
CHILD = """
import sys, time
from pathlib import Path
from cairn.demo import platform
from cairn.demo.batch import DemoFiles, run_worker

workdir, window = Path(sys.argv[1]), sys.argv[2]
original = platform.AdPlatform.apply

def stopped(self, key, app_id, changes):
    if app_id == "app-01" and window == "after the platform acted":
        original(self, key, app_id, changes)  # the change is made; cairn never hears back
    if app_id == "app-01":
        (workdir / "stopped").write_text(window)
        while True:
            time.sleep(1)  # real-sleep-ok: held here until the test SIGKILLs it
    return original(self, key, app_id, changes)

platform.AdPlatform.apply = stopped
run_worker(DemoFiles(workdir), "%s", %d)
""" % (BATCH, APPS)  # noqa: UP031 - the child's source, with its batch filled in


@pytest.mark.parametrize("window", ["before the platform acted", "after the platform acted"])
def test_a_kill_inside_apply_changes_each_app_once_and_the_report_says_so(
    tmp_path: Path, window: str
) -> None:
    """SIGKILL the demo's worker inside apply for app-01, before or after the
    platform made the change, then run the batch again: the platform's ledger
    holds exactly one change, under the app's key. Killed before the platform acted, the key
    was claimed twice (reconcile found no change, so cairn called again) and the
    report says so; killed after, it was claimed once (reconcile found the
    change) and the report mentions no second claim."""
    files = DemoFiles(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), window],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert wait_until(lambda: (tmp_path / "stopped").exists(), timeout=60), (
            child.stderr.read() if child.poll() is not None and child.stderr else "still running"
        )
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        if child.stderr:
            child.stderr.close()
    before = applies_per_app(files.ledger)
    assert before["app-01"] == (1 if window == "after the platform acted" else 0)

    rerun = run_worker(files, BATCH, APPS)
    assert rerun.ok

    assert applies_per_app(files.ledger) == {"app-01": 1}
    lines = [json.loads(line) for line in files.ledger.read_text().splitlines()]
    assert [entry["key"] for entry in lines] == [f"{BATCH}/app-01/apply"]
    store = open_store(files.store_url)
    try:
        claims = {op.key: op.calls for op in store.list_operations(prefix=f"{BATCH}/")}
    finally:
        store.close()
    twice = window == "before the platform acted"
    assert claims == {f"{BATCH}/app-01/apply": 2 if twice else 1}

    snapshot = KillSnapshot(
        steps_logged=0, counts={}, unfinished={}, in_flight=0, in_flight_fresh=0
    )
    verdict = verify(files, BATCH, APPS, snapshot)
    out = io.StringIO()
    report.outcome(Console(file=out, width=200, force_terminal=False), verdict)
    said = out.getvalue()
    assert "applied exactly once (1/1)" in said
    assert "apply: one operation key per app (1 key)" in said
    # A call cut off before the platform acted is made again, and the report
    # says it is the design; one that took effect is called once.
    assert ("(1 key); 1 took a second call, by design:" in said) is twice
    assert ("the kill cut its first call off before the platform acted" in said) is twice
    assert ("(1 key), each called once" in said) is not twice
