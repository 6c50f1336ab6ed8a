"""``cairn fidelity TASK``: does the compressed history lead to the same decisions?

At up to ``--probes`` model turns that had a compacted context, the model is asked
for its next move twice, with the full recorded history and with the context the
agent really had, and the agreement rate is printed with every disagreement. The
model is reached through the openai SDK, configured from the environment
(OPENAI_API_KEY, OPENAI_BASE_URL: any OpenAI-compatible endpoint).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.admin import conversation_name
from cairn.agent.archive import iter_history
from cairn.agent.fidelity import fidelity, next_tool_call, same_tool
from cairn.agent.providers import default_client
from cairn.errors import CairnError

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import fail, stdout_console
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable
from .conversation import NameOption
from .show import TaskArgument, get_task_or_fail


def fidelity_command(
    task_id: TaskArgument,
    model: Annotated[str, typer.Option("--model", "-m", help="The model that decides.")],
    name: NameOption = None,
    probes: Annotated[int, typer.Option("--probes", help="How many turns to probe.")] = 10,
    compare: Annotated[
        str,
        typer.Option("--compare", help="'tool': same tool agrees; 'call': same tool and args."),
    ] = "tool",
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Agreement between next-tool-call decisions on the full and the compacted history."""
    with opened_store(store) as opened:
        get_task_or_fail(opened, task_id)
        conv = conversation_name(opened, task_id, name)
        rows = list(iter_history(opened, task_id, conv, blobs=blobs_for(store, blobs)))
    try:
        decide = next_tool_call(default_client(), model=model)
    except CairnError as exc:
        fail(str(exc))
    same = same_tool if compare == "tool" else None
    report = fidelity(rows, None, decide, probes, same=same)
    if as_json:
        print_json(report.to_json())
        return
    console = stdout_console()
    console.print(
        f"agreement {report.rate:.0%}: {report.agreements} of {report.probes} probes "
        f"(positions {', '.join(map(str, report.positions)) or 'none'})"
    )
    if report.disagreements:
        table = RowTable(
            console,
            ("position", "full history", "compacted", "tokens full", "tokens compacted"),
            right=("position", "tokens full", "tokens compacted"),
            free=("full history", "compacted"),
        )
        for d in report.disagreements:
            table.add_row(
                str(d.position),
                repr(d.full),
                repr(d.compressed),
                str(d.full_tokens),
                str(d.compressed_tokens),
            )
        table.print()
