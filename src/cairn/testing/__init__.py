"""Helpers for testing workflows built on cairn: fault hooks, fault plans, crash tests.

``set_fault_hook`` installs a function that cairn calls at every boundary of a
task with ``(point, task_id, seq, name)``. A test can raise there, or kill the
process, to prove that a workflow survives a crash at that exact point.
Production code carries only the no-op default. The points:

=================  ==========================================================
``before_step``    a step's function is about to be called
``step_returned``  it returned; its result is not recorded yet (the window in
                   which a crash makes a step run twice)
``after_step``     its result is committed
``before_input``,  the same three for recorded inputs (``ctx.now()``,
``input_returned``, ``ctx.uuid()``, ``ctx.random()``, ``ctx.record()``)
``after_input``
``after_claim``    an operation's key is claimed and committed; its function
                   has not been called (``name`` is the key)
``after_act``      the operation's function returned; nothing is recorded yet
``after_record``   the operation's result is committed
``before_llm``,    the same three for a recorded model call (``ctx.llm``,
``llm_returned``,  ``ctx.llm_call``)
``after_llm``
``before_conv``,   the same three for a conversation compaction (its
``conv_returned``, summarizer call)
``after_conv``
``after_task``     the task's completion is committed
=================  ==========================================================

Built on the hook:

- ``FaultPlan`` / ``Fault``: inject a crash at a named point, for a given step,
  key or position, once or every time, as ``InjectedCrash`` or a process exit.
- ``crash_at_every_step``: crash a task at each of its boundaries in turn, in
  fresh processes, resume it, and check its result, its outside effects and
  how often each function ran. ``CrashReport.table()`` shows every case. The
  pytest fixture ``cairn_crash_check`` (plugin ``cairn.testing.plugin``, loaded
  automatically) fails a test with that table.
"""

from __future__ import annotations

from cairn.app import Cairn
from cairn.clock import FakeClock
from cairn.engine.run import FaultHook, no_fault
from cairn.testing.crash import (
    Boundary,
    CaseResult,
    CleanRunFailed,
    CrashReport,
    crash_at_every_step,
)
from cairn.testing.faults import Fault, FaultPlan, Fired, InjectedCrash

__all__ = [
    "Boundary",
    "CaseResult",
    "CleanRunFailed",
    "CrashReport",
    "FakeClock",
    "Fault",
    "FaultHook",
    "FaultPlan",
    "Fired",
    "InjectedCrash",
    "clear_fault_hook",
    "crash_at_every_step",
    "set_fault_hook",
]


def set_fault_hook(app: Cairn, hook: FaultHook) -> None:
    """Call ``hook(point, task_id, seq, name)`` at every task boundary of ``app``."""
    app.fault_hook = hook


def clear_fault_hook(app: Cairn) -> None:
    """Back to the no-op hook."""
    app.fault_hook = no_fault
