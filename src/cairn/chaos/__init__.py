"""Chaos testing: SIGKILL a batch at random moments, resume it, audit the store.

``run_chaos`` (and ``cairn chaos``) runs a target, a function that takes a store
URL and runs a batch to its end, in a new process, kills it after a seeded
random delay, resumes it, and repeats; then runs it to the end and reports the
restart success rate, redundant executions, lost steps, duplicate effects and
the wall-clock time. The built-in target is a small fast batch
(``cairn.chaos.batch``). A target reports step runs and outside effects through
``cairn.chaos.log`` so the runner can count them.
"""

from __future__ import annotations

from cairn.chaos.integrity import Loss
from cairn.chaos.log import log_effect, log_step_run, logged_effect
from cairn.chaos.report import ChaosReport, RunRecord
from cairn.chaos.runner import BUILTIN, run_chaos

__all__ = [
    "BUILTIN",
    "ChaosReport",
    "Loss",
    "RunRecord",
    "log_effect",
    "log_step_run",
    "logged_effect",
    "run_chaos",
]
