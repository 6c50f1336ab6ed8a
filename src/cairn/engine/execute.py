"""Running one claimed task to an outcome: the task machine and its two edges."""

from __future__ import annotations

import logging
from contextvars import Token
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from cairn.engine import budgets, tasklogs
from cairn.engine.claim import release
from cairn.engine.errortext import describe_error
from cairn.engine.observer import tell
from cairn.engine.run import Call, Machine, TaskRun, Wait, adrive, current, drive
from cairn.engine.tasklogs import TaskLog
from cairn.errors import (
    CairnControl,
    Cancelled,
    CodecError,
    LeaseLost,
    StoreError,
    Suspended,
    TimeLimitExceeded,
)
from cairn.retry import Retry
from cairn.store.groupcommit import Coalescer, coalescer_for, groups_by_default
from cairn.store.records import TaskRecord

if TYPE_CHECKING:
    from cairn.engine.config import EngineConfig
    from cairn.task import TaskDef

log = logging.getLogger("cairn")

OutcomeStatus = Literal["completed", "failed", "cancelled", "lost", "waiting"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one run of one task ended in this process."""

    task_id: str
    status: OutcomeStatus
    result: Any = None
    error: BaseException | None = None
    resumed: bool = False


def _task_machine(
    run: TaskRun,
    ctx: Any,
    task: TaskDef[..., Any],
    kwargs: dict[str, Any],
    retry: Retry,
    retry_base: int,
) -> Machine[Any]:
    if run.attempt == retry_base:
        run.start_attempt(retry_base + 1, None)
    while True:
        try:
            result = yield Call(task.fn, (ctx,), kwargs)
            if run.poisoned is not None:
                raise run.poisoned  # swallowed by the task's code; still fatal
            output = run.encode(result, f"task {task.name!r} result")
            if run.poisoned is not None:
                raise run.poisoned  # the blob store had no room for the result
        except StoreError:
            raise  # the store is unreachable: not the task's failure, spend no attempt
        except Exception as exc:
            used = run.attempt - retry_base
            if not retry.should_retry(exc, used):
                run.finish("failed", None, exc)
                raise
            delay = retry.delay(used)
            log.info(
                "task %s attempt %d failed (%s); retrying in %.1fs",
                run.task_id,
                used,
                type(exc).__name__,
                delay,
            )
            run.start_attempt(run.attempt + 1, exc)
            run.restart()
            yield Wait(delay)
            continue
        run.finish("completed", output, None)
        run.hook("after_task", run.task_id, run.seq, task.name)
        return run.decode(output, "task result")


@dataclass(frozen=True, slots=True)
class _Prepared:
    run: TaskRun
    # The task's ctx (the app's Context), made by EngineConfig.make_context.
    ctx: Any
    machine: Machine[Any]
    resumed: bool


def _prepare(engine: EngineConfig, record: TaskRecord) -> _Prepared:
    task = engine.registered(record.name, task_id=record.id)
    codec = engine.codec_named(record.codec)
    history = engine.store.load_history(record.id)
    deadline = None
    if task.max_duration is not None and record.started_at is not None:
        deadline = record.started_at + timedelta(seconds=task.max_duration)
    run = TaskRun(
        store=engine.store,
        codec=codec,
        clock=engine.clock,
        task_id=record.id,
        batch=record.batch,
        fence=record.fence,
        attempt=record.attempts,
        history=history,
        leases=engine.leases,
        takeover_grace=engine.takeover_grace,
        hook=engine.fault_hook,
        poll_interval=engine.poll_interval,
        deadline=deadline,
        max_duration=task.max_duration,
        limits=engine.limits,
        offloader=engine.offloader,
        engine=engine,
        group=_group_of(engine),
        run_number=record.run,
        budget=task.budget,
        priority=record.priority,
    )
    run.on_change, run.rerun_models = engine.change_policy(task)
    engine.leases.follow(record.id, record.fence, lambda: run.in_flight)
    budgets.declare(run)
    ctx = engine.make_context(run)
    kwargs = run.decode(record.args, "task arguments")
    run.args = kwargs
    retry = task.retry or engine.task_retry
    machine = _task_machine(run, ctx, task, kwargs, retry, record.retry_base)
    return _Prepared(run, ctx, machine, resumed=bool(history))


def _group_of(engine: EngineConfig) -> Coalescer | None:
    """The group-commit queue this run's writes go through, or None: as the app
    said, or where it said nothing, as ``groups_by_default`` decides for its store."""
    wanted = engine.group_commit
    if wanted is None:
        wanted = groups_by_default(engine.store)
    return coalescer_for(engine.store) if wanted else None


def _ended(run: TaskRun, error: BaseException, resumed: bool) -> Outcome:
    task_id = run.task_id
    if isinstance(error, Suspended):
        log.info("%s", error)
        return Outcome(task_id, "waiting", error=error, resumed=resumed)
    if isinstance(error, TimeLimitExceeded):
        # Raised at a step boundary, past user code: record the failure here.
        try:
            run.finish("failed", None, error)
        except (Cancelled, LeaseLost):
            return Outcome(task_id, "lost", error=error, resumed=resumed)
        return Outcome(task_id, "failed", error=error, resumed=resumed)
    if isinstance(error, Cancelled):
        return Outcome(task_id, "cancelled", error=error, resumed=resumed)
    if isinstance(error, LeaseLost):
        log.warning("%s", error)
        return Outcome(task_id, "lost", error=error, resumed=resumed)
    return Outcome(task_id, "failed", error=error, resumed=resumed)


def _prepare_or_settle(engine: EngineConfig, record: TaskRecord) -> _Prepared | Outcome:
    """Prepare a claimed task, or settle it if it cannot start.

    Arguments that no longer decode (a class renamed since they were recorded)
    will never decode on a retry either: the task fails with the error recorded,
    and the rest of the batch goes on. Anything else (the function is not
    registered here) hands the task back untouched for a process that knows it.
    """
    try:
        return _prepare(engine, record)
    except CodecError as exc:
        # No TaskRun exists yet (its codec or arguments are what failed): the
        # outcome is written here, under the claim's fence, like TaskRun.finish.
        try:
            engine.store.finish_task(
                record.id, record.fence, "failed", None, describe_error(exc), engine.clock.now()
            )
        finally:
            release(engine, record.id)
        return Outcome(record.id, "failed", error=exc)
    except BaseException as exc:
        try:
            hand_back(engine, record, exc)
        finally:
            release(engine, record.id)
        raise


def hand_back(engine: EngineConfig, record: TaskRecord, cause: BaseException) -> None:
    """Give a claimed task back as pending (its fence moves), after an error of
    the store or of cairn itself (``cause``): never leave it ``running`` if the
    store lets us write. If even that fails, the task waits for its lease to
    lapse (or for this process to end), and is then taken up from its last
    checkpoint.

    A store that refuses the hand-back says why in its own words, most often
    the very error that made us hand back (a full disk refuses this write too):
    one line, then, not another traceback chained to the first."""
    try:
        engine.store.release_task(record.id, record.fence, engine.clock.now(), patient=False)
    except StoreError as exc:
        said = "the same error" if str(exc) == str(cause) else " ".join(str(exc).split())
        log.warning(
            "cairn: could not hand task %s back to the store (%s); it resumes once its "
            "lease lapses",
            record.id,
            said,
        )
    except Exception:
        log.warning(
            "cairn: could not hand task %s back to the store; it resumes once its lease lapses",
            record.id,
            exc_info=True,
        )


def _task_event(
    engine: EngineConfig, point: str, record: TaskRecord, outcome: Outcome | None = None
) -> None:
    tell(
        engine.observer, point, engine.clock.now, batch=record.batch, task_id=record.id,
        task_name=record.name, parent_id=record.parent_id, fence=record.fence,
        status=None if outcome is None else outcome.status,
        error=None if outcome is None else outcome.error,
    )  # fmt: skip


def execute(engine: EngineConfig, record: TaskRecord) -> Outcome:
    """Run a claimed sync task in this thread (claimed and marked active)."""
    _task_event(engine, "task_started", record)
    try:
        outcome = _execute(engine, record)
    except BaseException as exc:
        _task_event(engine, "task_ended", record, Outcome(record.id, "lost", error=exc))
        raise
    _task_event(engine, "task_ended", record, outcome)
    return outcome


async def aexecute(engine: EngineConfig, record: TaskRecord) -> Outcome:
    """Run a claimed async task in the running event loop (claimed and marked active)."""
    _task_event(engine, "task_started", record)
    try:
        outcome = await _aexecute(engine, record)
    except BaseException as exc:
        _task_event(engine, "task_ended", record, Outcome(record.id, "lost", error=exc))
        raise
    _task_event(engine, "task_ended", record, outcome)
    return outcome


def _capture(run: TaskRun) -> tuple[TaskLog, Token[TaskLog | None]]:
    """Keep what the task logs from here on (cairn.engine.tasklogs)."""
    tasklogs.install()
    log = TaskLog(lambda: run.attempt)
    return log, tasklogs.capturing.set(log)


def _kept(run: TaskRun, log: TaskLog, token: Token[TaskLog | None]) -> None:
    tasklogs.capturing.reset(token)
    tasklogs.save(run.store, run.task_id, log)


def _execute(engine: EngineConfig, record: TaskRecord) -> Outcome:
    prepared = _prepare_or_settle(engine, record)
    if isinstance(prepared, Outcome):
        return prepared
    token = current.set(prepared.ctx)
    logs = _capture(prepared.run)
    try:
        result = drive(prepared.machine, engine.clock)
    except StoreError as exc:
        # The store failed under the task (unreachable, locked, full): not the
        # task's failure, so no attempt is spent. The task is handed back, and
        # the worker or batch stops as a whole with the store's error.
        hand_back(engine, record, exc)
        raise
    except (CairnControl, Exception) as exc:  # noqa: BLE001 - becomes the outcome
        return _ended(prepared.run, exc, prepared.resumed)
    finally:
        _kept(prepared.run, *logs)
        release(engine, record.id)
        current.reset(token)
    return Outcome(record.id, "completed", result=result, resumed=prepared.resumed)


async def _aexecute(engine: EngineConfig, record: TaskRecord) -> Outcome:
    prepared = _prepare_or_settle(engine, record)
    if isinstance(prepared, Outcome):
        return prepared
    token = current.set(prepared.ctx)
    logs = _capture(prepared.run)
    try:
        result = await adrive(prepared.machine, engine.clock)
    except StoreError as exc:
        # The store failed under the task (unreachable, locked, full): not the
        # task's failure, so no attempt is spent. The task is handed back, and
        # the worker or batch stops as a whole with the store's error.
        hand_back(engine, record, exc)
        raise
    except (CairnControl, Exception) as exc:  # noqa: BLE001 - becomes the outcome
        return _ended(prepared.run, exc, prepared.resumed)
    finally:
        _kept(prepared.run, *logs)
        release(engine, record.id)
        current.reset(token)
    return Outcome(record.id, "completed", result=result, resumed=prepared.resumed)
