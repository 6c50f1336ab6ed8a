"""A dry replay of one task against the current code (``cairn check``).

The task function runs from the top on a ``TaskRun`` in checking mode: every
recorded position returns its recorded value after the usual comparisons
(kind and name, then fingerprint), so no step, operation or model call is
called for it; the first position without a completed record stops the
replay (from there the task would do new work, which is compatible by
definition). The run's fence is one no claim ever has, so even a write the
machines would try is refused by the store; the check writes nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from cairn.engine.changes import Diverged
from cairn.engine.run import Call, CheckReached, Machine, TaskRun, adrive, current, drive
from cairn.errors import Cancelled, LeaseLost, NonDeterminismError
from cairn.store.records import StepRecord, TaskRecord

if TYPE_CHECKING:
    from cairn.engine.config import EngineConfig

Verdict = Literal["compatible", "changed", "diverged", "error"]
# No claim ever has this fence: a write under it is refused by the store.
_NO_FENCE = -1


@dataclass(frozen=True, slots=True)
class DryReplay:
    """What replaying one task's history against the current code found.

    ``seq`` is the first changed or diverging position (or where the replay
    stopped, for a compatible task: the last position it looked at);
    ``recorded`` and ``current`` are the two fingerprints (for ``changed``) or
    the two names (for ``diverged``); ``what`` says what differs, or for
    ``error`` what the task's code raised on replay."""

    task: TaskRecord
    verdict: Verdict
    history: dict[int, StepRecord]
    seq: int | None = None
    label: str = ""
    recorded: str = ""
    current: str = ""
    what: str = ""

    @property
    def unprinted(self) -> int:
        """Entries recorded before fingerprints (schema 3): never compared."""
        return sum(1 for r in self.history.values() if r.kind == "step" and r.fingerprint is None)


def dry_replay(engine: EngineConfig, record: TaskRecord) -> DryReplay:
    """Replay ``record``'s history against the code ``engine`` registers."""
    history = engine.store.load_history(record.id)
    if not history:
        return DryReplay(record, "compatible", history)
    task = engine.registered(record.name, task_id=record.id)
    run = TaskRun(
        store=engine.store,
        codec=engine.codec_named(record.codec),
        clock=engine.clock,
        task_id=record.id,
        batch=record.batch,
        fence=_NO_FENCE,
        attempt=record.attempts,
        history=dict(history),
        leases=engine.leases,
        takeover_grace=engine.takeover_grace,
        poll_interval=float("inf"),
        limits=engine.limits,
        offloader=engine.offloader,
        engine=engine,
        checking=True,
    )
    run.on_change, run.rerun_models = engine.change_policy(task)
    ctx = engine.make_context(run)
    kwargs = run.decode(record.args, "task arguments")
    machine = _replay(task.fn, ctx, kwargs)
    token = current.set(ctx)
    try:
        if task.is_async:
            asyncio.run(adrive(machine, engine.clock))
        else:
            drive(machine, engine.clock)
    except (CheckReached, LeaseLost, Cancelled):
        pass  # new work from here (or a write the store refused): compatible so far
    except Diverged as changed:
        return DryReplay(
            record,
            "changed",
            history,
            seq=changed.seq,
            label=changed.label,
            recorded=changed.recorded,
            current=changed.current,
            what=changed.what,
        )
    except NonDeterminismError as exc:
        return _diverged(record, history, exc)
    except Exception as exc:  # noqa: BLE001 - the task's code failed on replay: reported
        return DryReplay(record, "error", history, what=f"{type(exc).__name__}: {exc}")
    finally:
        current.reset(token)
    if isinstance(run.poisoned, NonDeterminismError):  # swallowed by the task's code
        return _diverged(record, history, run.poisoned)
    return DryReplay(record, "compatible", history, seq=run.seq)


def _replay(fn: Any, ctx: Any, kwargs: dict[str, Any]) -> Machine[Any]:
    return (yield Call(fn, (ctx,), kwargs))


def _diverged(
    record: TaskRecord, history: dict[int, StepRecord], exc: NonDeterminismError
) -> DryReplay:
    return DryReplay(
        record,
        "diverged",
        history,
        seq=exc.seq,
        label=f"position {exc.seq}",
        recorded=exc.recorded,
        current=exc.current,
        what="the code asks for another entry here",
    )
