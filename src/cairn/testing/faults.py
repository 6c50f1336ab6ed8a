"""Fault plans: crash a task at a named boundary, once or every time.

A ``FaultPlan`` is a fault hook (see ``cairn.testing``) built from ``Fault``
values. Each fault names a point and, optionally, the step, operation key, task
or position it applies to. When a boundary matches, the fault *fires*: it raises
``InjectedCrash`` (a ``BaseException``, so it escapes ``except Exception:`` in
user code the way a real crash would), or ends the process with ``os._exit(137)``
or with SIGKILL.

A plan counts what fired in ``plan.fired``. Given a ``marker_dir``, it also
leaves one file per firing there, so a fault that fires ``times=1`` stays fired
in the next process too: that is how a subprocess that kills itself can be run
again and get through.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cairn.app import Cairn

Action = Literal["raise", "exit", "sigkill"]
ACTIONS: tuple[Action, ...] = ("raise", "exit", "sigkill")

STEP_POINTS = ("before_step", "step_returned", "after_step")
INPUT_POINTS = ("before_input", "input_returned", "after_input")
OPERATION_POINTS = ("after_claim", "after_act", "after_record")
# A recorded model call (ctx.llm / ctx.llm_call) and a conversation compaction.
LLM_POINTS = ("before_llm", "llm_returned", "after_llm")
CONVERSATION_POINTS = ("before_conv", "conv_returned", "after_conv")
TASK_POINTS = ("after_task",)
POINTS: tuple[str, ...] = (
    *STEP_POINTS,
    *INPUT_POINTS,
    *OPERATION_POINTS,
    *LLM_POINTS,
    *CONVERSATION_POINTS,
    *TASK_POINTS,
)

# The exit status of a process ended by an "exit" fault: what a shell reports
# for a process killed by SIGKILL (128 + 9), so both read the same in logs.
EXIT_STATUS = 137


class InjectedCrash(BaseException):
    """Raised by a fault with ``action="raise"``: a crash at a chosen boundary.

    It derives from ``BaseException`` so that a task's ``except Exception:``
    cannot catch it and carry on, just as it could not survive a real crash.
    """

    def __init__(self, point: str, task_id: str, seq: int, name: str) -> None:
        super().__init__(f"injected crash at {point} of {name!r} (task {task_id!r}, seq {seq})")
        self.point = point
        self.task_id = task_id
        self.seq = seq
        self.name = name


@dataclass(frozen=True, slots=True)
class Fault:
    """One failure to inject.

    Attributes:
        point: where (one of ``POINTS``).
        step: the step, recorded input or task name it applies to (None: any).
        key: for operation points, the operation key (None: any).
        seq: the history position (None: any).
        task_id: the task (None: any).
        times: how many times it fires; None fires every time.
        skip: how many matching boundaries to let pass before it fires.
        action: ``"raise"`` (``InjectedCrash``), ``"exit"`` (``os._exit(137)``)
            or ``"sigkill"`` (SIGKILL to this process).
    """

    point: str
    step: str | None = None
    key: str | None = None
    seq: int | None = None
    task_id: str | None = None
    times: int | None = 1
    skip: int = 0
    action: Action = "raise"

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; the points are {list(POINTS)}")
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; use one of {list(ACTIONS)}")
        if self.key is not None and self.point not in OPERATION_POINTS:
            raise ValueError(
                f"key= selects an operation, but {self.point!r} is not an operation point "
                f"({', '.join(OPERATION_POINTS)}); use step= for steps"
            )
        if self.step is not None and self.point in OPERATION_POINTS:
            raise ValueError(f"{self.point!r} is an operation point: select it with key=")
        if self.times is not None and self.times < 1:
            raise ValueError("times must be at least 1, or None for every time")
        if self.skip < 0:
            raise ValueError("skip must be zero or more")

    def matches(self, point: str, task_id: str, seq: int, name: str) -> bool:
        """True if a boundary ``(point, task_id, seq, name)`` is one this fault names."""
        wanted_name = self.key if point in OPERATION_POINTS else self.step
        return (
            point == self.point
            and (wanted_name is None or wanted_name == name)
            and (self.seq is None or self.seq == seq)
            and (self.task_id is None or self.task_id == task_id)
        )


@dataclass(frozen=True, slots=True)
class Fired:
    """A fault that fired: which one (its index in the plan), and where."""

    fault: int
    point: str
    task_id: str
    seq: int
    name: str


class FaultPlan:
    """A fault hook that injects the given faults; install it with ``plan.install(app)``.

    ``marker_dir``: where firings are remembered across processes (one file per
    firing, named by the fault's index in the plan), so build the plan the same
    way in every process that shares the directory.
    """

    def __init__(self, faults: Iterable[Fault] = (), *, marker_dir: Path | str | None = None):
        self.faults = list(faults)
        self.marker_dir = None if marker_dir is None else Path(marker_dir)
        self.fired: list[Fired] = []
        self._seen = [0] * len(self.faults)
        # Steps of a batch run on several threads: one boundary at a time.
        self._lock = threading.Lock()

    def install(self, app: Cairn) -> FaultPlan:
        """Make this plan ``app``'s fault hook. Returns the plan."""
        app.fault_hook = self
        return self

    def __call__(self, point: str, task_id: str, seq: int, name: str) -> None:
        with self._lock:
            fault_index = self._due(point, task_id, seq, name)
            if fault_index is None:
                return
            fault = self.faults[fault_index]
            self.fired.append(Fired(fault_index, point, task_id, seq, name))
            self._mark(fault_index)
        _act(fault.action, point, task_id, seq, name)

    def fired_count(self, fault_index: int) -> int:
        """How many times fault number ``fault_index`` has fired (in every process
        that shares the marker directory, when there is one)."""
        if self.marker_dir is None:
            return sum(1 for fired in self.fired if fired.fault == fault_index)
        return len(list(self.marker_dir.glob(f"fault-{fault_index}.*")))

    def _due(self, point: str, task_id: str, seq: int, name: str) -> int | None:
        for index, fault in enumerate(self.faults):
            if not fault.matches(point, task_id, seq, name):
                continue
            self._seen[index] += 1
            if self._seen[index] <= fault.skip:
                continue
            if fault.times is None or self.fired_count(index) < fault.times:
                return index
        return None

    def _mark(self, fault_index: int) -> None:
        if self.marker_dir is None:
            return
        self.marker_dir.mkdir(parents=True, exist_ok=True)
        number = self.fired_count(fault_index) + 1
        # Written before the process dies: os._exit and SIGKILL keep what the
        # kernel already has, so the next process sees the marker.
        (self.marker_dir / f"fault-{fault_index}.{number}-{os.getpid()}").touch()


def _act(action: Action, point: str, task_id: str, seq: int, name: str) -> None:
    if action == "exit":
        os._exit(EXIT_STATUS)
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedCrash(point, task_id, seq, name)
