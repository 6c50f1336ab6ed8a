"""Review the ad settings of a few apps: four checkpointed steps and one apply.

A small version of scenario 1. Each app is a task: fetch its settings, analyze
them, propose a change, validate it, then apply it to the ad platform, at most
once per app, even across crashes. The ad platform is simulated by a ledger
file in the current directory (``ad-platform-ledger.jsonl``), one line per
change it received.

Run it (kill it with Ctrl-C or SIGKILL part way, then run it again)::

    python examples/review_apps.py --apps 5 --workdir /tmp/review

Crash-test it: every boundary of one app's review, in fresh processes::

    from cairn.testing import crash_at_every_step

    report = crash_at_every_step(
        "examples/review_apps.py:review_app",
        {"app_id": "app-01"},
        effects="examples/review_apps.py:ledger_entries",
    )
    print(report.table())

``CRASH_CHECK`` below is how cairn's own tests crash-test every example.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cairn import Cairn, Context, op_key

# No store argument: the store comes from $CAIRN_STORE, else ./.cairn/cairn.db.
# That is also what lets crash_at_every_step give every case a store of its own.
app = Cairn()

LEDGER = Path("ad-platform-ledger.jsonl")
BATCH = "review-apps"

CRASH_CHECK = {
    "task": "review_app",
    "kwargs": {"app_id": "app-01"},
    "effects": "ledger_entries",
}


def _number(*parts: str) -> int:
    """A stable pseudo-random number for the simulation."""
    return int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)


# -- the outside world: an ad platform and an agent, simulated -----------------------


def fetch_settings(app_id: str) -> dict[str, Any]:
    return {"app_id": app_id, "daily_budget": 50 + _number(app_id, "budget") % 200}


def analyze(app_id: str, settings: dict[str, Any]) -> dict[str, Any]:
    overspending = settings["daily_budget"] > 150
    return {"issue": "budget too high" if overspending else "none", "settings": settings}


def propose(app_id: str, analysis: dict[str, Any]) -> dict[str, Any]:
    budget = analysis["settings"]["daily_budget"]
    new_budget = 150 if analysis["issue"] != "none" else budget
    return {"app_id": app_id, "daily_budget": new_budget}


def validate(app_id: str, proposal: dict[str, Any]) -> dict[str, Any]:
    if not 0 < proposal["daily_budget"] <= 150:
        raise ValueError(f"{app_id}: budget {proposal['daily_budget']} out of range")
    return proposal


def apply_change(key: str, app_id: str, change: dict[str, Any]) -> dict[str, Any]:
    """The side effect: the platform records the change under ``key``."""
    line = json.dumps({"key": key, "app_id": app_id, "change": change}) + "\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write: a kill never leaves half a line
    finally:
        os.close(fd)
    return {"receipt": key, "applied": change}


def find_change(key: str) -> dict[str, Any] | None:
    """Reconcile: ask the platform whether it already has the change for ``key``."""
    for entry in _ledger():
        if entry["key"] == key:
            return {"receipt": key, "applied": entry["change"]}
    return None


def _ledger() -> list[dict[str, Any]]:
    if not LEDGER.exists():
        return []
    return [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()]


def ledger_entries() -> dict[str, int]:
    """How many changes the platform received, per key (the crash check's effects)."""
    return dict(Counter(entry["key"] for entry in _ledger()))


# -- the workflow ------------------------------------------------------------------------


@app.task
def review_app(ctx: Context, app_id: str) -> dict[str, Any]:
    settings = ctx.step("fetch", fetch_settings, app_id)
    analysis = ctx.step("analyze", analyze, app_id, settings)
    proposal = ctx.step("propose", propose, app_id, analysis)
    checked = ctx.step("validate", validate, app_id, proposal)
    receipt = ctx.once(
        op_key("apply", app_id), apply_change, app_id, checked, reconcile=find_change
    )
    return {"app_id": app_id, "issue": analysis["issue"], "receipt": receipt["receipt"]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=5, help="how many apps (default: 5)")
    parser.add_argument("--workdir", type=Path, default=Path("review-apps-run"))
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(args.workdir)  # the store and the ledger live there
    items = [{"app_id": f"app-{n:02d}"} for n in range(1, args.apps + 1)]
    with app:
        report = app.run_batch(BATCH, review_app, items, progress=False)
    applied = ledger_entries()
    print(f"{report.completed}/{report.total} apps reviewed in {Path.cwd()}")
    print(f"changes the platform received: {sum(applied.values())} for {len(applied)} apps")
    return 0 if report.ok and all(count == 1 for count in applied.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
