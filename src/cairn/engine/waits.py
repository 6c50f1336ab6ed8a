"""``ctx.wait_for``: suspend a task until a signal arrives or a timeout passes.

A waiting task holds no process, thread or lease: its row says ``waiting``,
with the time its timeout wakes it. The wait is a history entry like any other.
The first time the task reaches it, the entry is written as ``waiting`` with its
deadline; the task is then suspended, unless the signal is already there. The
store checks that in the same statement that suspends, so a signal sent at any
moment is either seen there or finds the task waiting and wakes it.

When the task is taken up again (after a signal, or once its deadline has
passed), it replays to the entry, takes the signal or the timeout, and records
which, so every later replay sees the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cairn.codec import codec_for
from cairn.engine.run import TaskRun
from cairn.engine.steps import entry, record_completed
from cairn.errors import Suspended

Timeout = float | timedelta | None


@dataclass(frozen=True, slots=True)
class Signal:
    """What a ``ctx.wait_for`` returns: the signal's payload, or a timeout."""

    name: str
    payload: Any
    timed_out: bool
    received_at: datetime

    @property
    def ok(self) -> bool:
        """True when a signal arrived (not a timeout)."""
        return not self.timed_out


def seconds_of(timeout: Timeout) -> float | None:
    """A timeout as seconds, checked."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds < 0:
        raise ValueError(f"wait_for timeout must be zero or positive, not {seconds:g}s")
    return seconds


def wait_for(run: TaskRun, name: str, timeout: float | None) -> Signal:
    """Return the signal ``name`` (or a timeout), suspending the task until then.

    Not a machine: it calls no user code and never sleeps in process, so sync
    and async tasks share it as a plain function."""
    seq = run.next_seq()
    record = run.replayed(seq, "wait", name)
    what = f"wait for {name!r}"
    if record is not None and record.status == "completed":
        return _signal_of(run.decode(record.output or "null", what), name)
    started = run.now() if record is None else record.started_at
    deadline = (
        (None if timeout is None else started + timedelta(seconds=timeout))
        if record is None
        else record.retry_at
    )
    if record is None:
        run.write(
            entry(
                run,
                seq,
                "wait",
                name,
                "waiting",
                attempts=1,
                run_attempts=1,
                retry_at=deadline,
                started_at=started,
            )
        )
    sent = run.store.get_signal(run.task_id, name)
    if sent is None:
        if deadline is not None and run.now() >= deadline:
            return _finish(run, seq, name, started, None, timed_out=True)
        run.hook("before_suspend", run.task_id, seq, name)
        if run.suspend(name, deadline):
            raise Suspended(run.task_id, name)
        # Refused: the task is not ours any more, or the signal arrived just now.
        run.check_still_ours()
        sent = run.store.get_signal(run.task_id, name)
        if sent is None:
            run.lost()
    # Pickle only for a task that is itself pickled (its app opted in), never
    # because a signal row says so.
    trusted = run.codec.name == "pickle"
    payload = codec_for(sent.codec, trust_pickle=trusted).decode(sent.payload)
    return _finish(run, seq, name, started, payload, timed_out=False)


def _finish(
    run: TaskRun, seq: int, name: str, started: datetime, payload: Any, *, timed_out: bool
) -> Signal:
    received = run.now()
    value = {"payload": payload, "timed_out": timed_out, "received_at": received}
    output = run.encode(value, f"signal {name!r}")
    record_completed(run, seq, "wait", name, output, started)
    return _signal_of(run.decode(output, f"signal {name!r}"), name)


def _signal_of(value: Any, name: str) -> Signal:
    return Signal(name, value["payload"], bool(value["timed_out"]), value["received_at"])
