"""``cairn batches``: every batch with its task counts by status."""

from __future__ import annotations

from rich.text import Text

from cairn.store.records import TASK_STATUSES, BatchSummary

from ._consoles import note, stdout_console
from ._field_text import short_time
from ._json_output import JsonOption, batch_dict, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import STATUS_STYLES, RowTable

_COLUMNS = ("batch", "task", *TASK_STATUSES, "total", "first start", "last finish")


def batches_command(store: StoreOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """List batches with how many tasks are pending, running, completed, failed, cancelled."""
    with opened_store(store) as opened:
        summaries = opened.batch_summaries()
    if as_json:
        print_json([batch_dict(summary) for summary in summaries])
        return
    if not summaries:
        note(f"no batches in {store}")
        return
    _print_batches(summaries)


def _count_cell(status: str, count: int) -> Text:
    # Zeros stay plain so the eye goes to the counts that matter.
    return Text(str(count), style=STATUS_STYLES[status] if count else "dim")


def _print_batches(summaries: list[BatchSummary]) -> None:
    table = RowTable(stdout_console(), _COLUMNS, right=(*TASK_STATUSES, "total"))
    for summary in summaries:
        counts = [_count_cell(s, summary.counts.get(s, 0)) for s in TASK_STATUSES]
        table.add_row(
            summary.name,
            summary.task_name,
            *counts,
            str(summary.total),
            short_time(summary.first_started_at),
            short_time(summary.last_finished_at),
        )
    table.print()
