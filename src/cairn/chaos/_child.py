"""What a chaos run's child process does: run the target on the store, to the end."""

from __future__ import annotations

from typing import Any

from cairn.engine.batch import BatchReport
from cairn.testing._targets import load


def run_target(spec: dict[str, Any]) -> None:
    """Call ``target(store_url)``; a batch report that is not ok fails the run."""
    outcome = load(spec["target"])(spec["store_url"])
    if isinstance(outcome, BatchReport) and not outcome.ok:
        raise SystemExit(
            f"the batch ended with tasks not completed: {outcome.counts}; "
            f"failures: {outcome.failures[:3]}"
        )
