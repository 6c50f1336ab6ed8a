"""``cairn diff``: what a rerun changed, per task and for a batch.

For each task whose current run came from ``cairn rerun``: each entry from the
fork point on whose output (or status) differs from the run it forked from,
whether its result changed, the operations the new run found done instead of
calling, and what its model calls cost; for a batch, the totals: tasks whose
result changed, the cost of the rerun (``cairn.admin.lineage``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from cairn.admin.lineage import BatchDiff, EntryChange, TaskDiff, batch_diff, task_diff
from cairn.admin.views import ValueView

from ._consoles import fail, note, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store, require_batch
from ._tables import RowTable
from .show import get_task_or_fail

_COLUMNS = ("task", "entry", "change", "before", "after")
_WIDTH = 40


def diff_command(
    task_id: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="The task whose rerun to show.")
    ] = None,
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="Every rerun task of this batch.")
    ] = None,
    store: StoreOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Show what a rerun changed: each entry whose output differs from the run
    it forked from, whether the result changed, and what the rerun cost."""
    if (task_id is None) == (batch is None):
        fail("say which: `cairn diff TASK` or `cairn diff --batch B`")
    with opened_store(store) as opened:
        if task_id is not None:
            diff = task_diff(opened, get_task_or_fail(opened, task_id))
            if diff is None:
                never = f"task {task_id} was never rerun (`cairn rerun {task_id} --from STEP`)"
                fail(never, code=1)
            found = BatchDiff(None, [diff])
        else:
            assert batch is not None
            require_batch(opened, batch)
            found = batch_diff(opened, batch)
    if as_json:
        print_json(_json(found))
        return
    _print(found)


def _shown(value: ValueView | None) -> str:
    if value is None:
        return "-"
    if value.blob is not None:
        return f"blob {value.blob.size} B sha256:{value.blob.sha256[:12]}"
    text = " ".join((value.json_text or value.raw or "").split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."


def _change_row(diff: TaskDiff, change: EntryChange) -> list[str]:
    where = change.after_seq if change.after_seq is not None else change.before_seq
    return [diff.task.id, f"{where} {change.name}", change.change, _shown(change.before),
            _shown(change.after)]  # fmt: skip


def _print(found: BatchDiff) -> None:
    console = stdout_console()
    if not found.tasks:
        note(f"no task of batch {found.batch} was rerun (`cairn rerun --batch ...`)")
        return
    table = RowTable(console, _COLUMNS, free=("before", "after"))
    for diff in found.tasks:
        for change in diff.changes:
            table.add_row(*_change_row(diff, change))
        if diff.result_changed:
            table.add_row(diff.task.id, "result", "changed", _shown(diff.result_before),
                          _shown(diff.result_after))  # fmt: skip
    if table.row_count:
        table.print()
    for diff in found.tasks:
        if diff.kept_operations:
            note(
                f"task {diff.task.id}: found done, not called again: "
                + ", ".join(diff.kept_operations)
            )
    cost = found.cost
    tokens = cost.usage.input_tokens + cost.usage.output_tokens
    said = (
        f"{len(found.tasks_changed)} of {len(found.tasks)} rerun task(s) changed; "
        f"{found.results_changed} result(s) changed; the rerun's model calls: {cost.calls} "
        f"call(s), {tokens} tokens, est. ${cost.cost:.4f}"
    )
    if found.unfinished:
        said += f"; {found.unfinished} not finished yet"
    console.print(Text(said), soft_wrap=True)


def _value(value: ValueView | None) -> Any:
    if value is None:
        return None
    if value.blob is not None:
        return {"blob": value.blob.ref, "size": value.blob.size, "sha256": value.blob.sha256}
    return value.json_text if value.json_text is not None else value.raw


def _task_json(diff: TaskDiff) -> dict[str, Any]:
    return {
        "task": diff.task.id,
        "run": diff.task.run,
        "forked_from": diff.forked_from,
        "fork_position": diff.fork_seq,
        "fork_entry": diff.fork_name,
        "finished": diff.finished,
        "result_changed": diff.result_changed,
        "changes": [
            {
                "kind": c.kind,
                "name": c.name,
                "change": c.change,
                "before_position": c.before_seq,
                "after_position": c.after_seq,
                "before": _value(c.before),
                "after": _value(c.after),
            }
            for c in diff.changes
        ],
        "unchanged": diff.unchanged,
        "found_done": diff.kept_operations,
        "calls": diff.cost.calls,
        "estimated_cost": round(diff.cost.cost, 6),
    }


def _json(found: BatchDiff) -> dict[str, Any]:
    cost = found.cost
    return {
        "batch": found.batch,
        "tasks": [_task_json(diff) for diff in found.tasks],
        "tasks_changed": len(found.tasks_changed),
        "results_changed": found.results_changed,
        "unfinished": found.unfinished,
        "calls": cost.calls,
        "input_tokens": cost.usage.input_tokens,
        "output_tokens": cost.usage.output_tokens,
        "estimated_cost": round(cost.cost, 6),
    }
