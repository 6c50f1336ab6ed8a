"""``ctx.spawn`` and ``ctx.join``: child tasks and waiting for their results.

A child is an ordinary task with an id derived from its parent's (``parent/key``;
by default the key is the child's function name and the spawn's position), in
the parent's batch, so any worker or the batch's own runner may take it. The
spawn is a history entry holding the child's id: a resumed parent replays it and
never starts a second child. The join is a history entry holding the children's
results: a resumed parent gets them back without looking at the children again.

While joining, a child no one has started is run right here, in the parent's
thread, so a parent run with ``engine.run`` (no workers) still makes progress. A
child that another live process runs is polled for. A child that is itself
waiting (for a signal) suspends the parent too, which then looks again every
``poll`` seconds without holding a process. A child that failed or was cancelled
raises ``ChildFailed``, which no retry policy retries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from cairn.engine.claim import claim_task, claimable
from cairn.engine.execute import aexecute, execute
from cairn.engine.run import Call, Machine, TaskRun, Wait
from cairn.engine.steps import EntryLabel, record_completed
from cairn.errors import ChildFailed, Suspended, TaskConflict, UnknownTask
from cairn.names import check_name
from cairn.store.records import NewTask, TaskRecord

if TYPE_CHECKING:
    from cairn.engine.config import EngineConfig
    from cairn.task import TaskDef


@dataclass(frozen=True, slots=True)
class ChildTask:
    """A handle on a task started with ``ctx.spawn``: give it to ``ctx.join``."""

    task_id: str


def spawn(
    engine: EngineConfig,
    run: TaskRun,
    task: TaskDef[..., Any],
    key: str | None,
    kwargs: dict[str, Any],
) -> ChildTask:
    """Create the child task once (replay returns the recorded handle)."""
    task_def = engine.registered(task.name)
    seq = run.next_seq()
    record = run.replayed(seq, "spawn", task_def.name)
    what = EntryLabel("spawn", task_def.name, seq)
    if record is not None and record.status == "completed":
        return ChildTask(run.decode(record.output or "null", what))
    started = run.now()
    args = task_def.encode_arguments(engine.codec, kwargs)
    child_id = f"{run.task_id}/{key if key is not None else f'{task_def.name}.{seq}'}"
    check_name("child task id", child_id)
    child = NewTask(
        child_id,
        task_def.name,
        args,
        engine.codec.name,
        run.batch,
        child_id,
        run.task_id,
        engine.version,
        parent_fence=run.fence,
        priority=run.priority,
    )
    # Insert-if-absent: a parent that died after this and before its record
    # finds its child here on the next run, and the check below accepts it.
    # Made only while this run holds the parent's fence: a cancel of the parent
    # reaches every child (docs/orchestration.md), so none is made after it.
    made = engine.store.create_task(child, started)
    existing = engine.store.get_task(child_id)
    if not made and existing is None:
        run.lost()  # the parent's fence moved: cancelled, or taken over
    if (
        existing is None
        or existing.name != task_def.name
        or not engine.same_arguments(existing, args)
    ):
        raise TaskConflict(
            f"ctx.spawn: task id {child_id!r} already belongs to another task "
            f"({None if existing is None else existing.name!r}); give spawn a key= of its own",
            task_id=run.task_id,
        )
    record_completed(run, seq, "spawn", task_def.name, run.encode(child_id, what), started)
    return ChildTask(child_id)


def _failed(child: TaskRecord) -> ChildFailed:
    error: dict[str, Any] = json.loads(child.error) if child.error else {}
    how = "was cancelled" if child.status == "cancelled" else "failed"
    return ChildFailed(
        f"child task {child.id!r} {how}: {error.get('type', '?')}: {error.get('message', '')}. "
        f"Retry it with `cairn retry {child.id}`, then retry this task.",
        task_id=child.id,
        error=error,
    )


def join_machine(
    engine: EngineConfig,
    run: TaskRun,
    children: Sequence[ChildTask],
    poll: float,
    in_loop: bool,
) -> Machine[list[Any]]:
    """Wait for every child to complete and return their results, in order."""
    seq = run.next_seq()
    record = run.replayed(seq, "join", "join")
    what = EntryLabel("join", "join", seq)
    if record is not None and record.status == "completed":
        return run.decode(record.output or "[]", what)  # type: ignore[no-any-return]
    started = run.now()
    ids = [child.task_id for child in children]
    while True:
        records: list[TaskRecord] = []
        for task_id in ids:
            found = engine.store.get_task(task_id)
            if found is None:
                raise UnknownTask(f"ctx.join: no task {task_id!r}", task_id=task_id)
            records.append(found)
        for child in records:
            if child.status in ("failed", "cancelled"):
                raise _failed(child)
        if all(child.status == "completed" for child in records):
            results = [
                engine.codec_named(child.codec).decode(child.result or "null") for child in records
            ]
            output = run.encode(results, what)
            record_completed(run, seq, "join", "join", output, started)
            return run.decode(output, what)  # type: ignore[no-any-return]
        now = run.now()
        runnable = next((c for c in records if claimable(engine, c, now)), None)
        if runnable is not None:
            runner = _arun_inline if in_loop else _run_inline
            yield Call(runner, (engine, runnable), {})
            continue
        if any(c.status == "waiting" for c in records) and not any(
            c.status == "running" for c in records
        ):
            # Every unfinished child waits for a signal: so does the parent, until
            # its next look, holding no process.
            wake = now + timedelta(seconds=poll)
            if run.suspend("", wake):
                raise Suspended(run.task_id, "its children")
            run.check_still_ours()
            continue
        yield Wait(run.poll_interval)


def _run_inline(engine: EngineConfig, child: TaskRecord) -> None:
    """Run a child no one has started in this thread (the parent's)."""
    claimed = claim_task(engine, child)
    if claimed is None:
        return  # another process took it first: the join polls for it
    if engine.registered(claimed.name).is_async:
        asyncio.run(aexecute(engine, claimed))
    else:
        execute(engine, claimed)


async def _arun_inline(engine: EngineConfig, child: TaskRecord) -> None:
    """``_run_inline`` for a parent running in an event loop."""
    claimed = claim_task(engine, child)
    if claimed is None:
        return
    if engine.registered(claimed.name).is_async:
        await aexecute(engine, claimed)
    else:
        await asyncio.to_thread(execute, engine, claimed)
