"""Helpers for testing workflows built on cairn.

``set_fault_hook`` installs a function that cairn calls at every boundary of a
task (``before_step`` just before a step's function is called, ``after_step``
once its result is committed, ``after_task`` once the task's completion is
committed) with ``(point, task_id, seq, name)``. A test
can raise there, or kill the process, to prove that a workflow survives a crash
at that exact point. Production code carries only the no-op default.
"""

from __future__ import annotations

from cairn._taskrun import FaultHook, no_fault
from cairn.app import Cairn
from cairn.clock import FakeClock

__all__ = ["FakeClock", "FaultHook", "clear_fault_hook", "set_fault_hook"]


def set_fault_hook(app: Cairn, hook: FaultHook) -> None:
    """Call ``hook(point, task_id, seq, name)`` at every task boundary of ``app``."""
    app.fault_hook = hook


def clear_fault_hook(app: Cairn) -> None:
    """Back to the no-op hook."""
    app.fault_hook = no_fault
