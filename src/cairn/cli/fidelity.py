"""``cairn fidelity TASK``: does the compressed history lead to the same decisions?

At every model turn that had a compacted context (up to ``--max-probes``; a
seeded stratified sample beyond), the model is asked for its next move three
times: with the full recorded history, with the context the agent really had,
and with the full history again. How often the full history agrees with itself
is the noise floor; the score (full against compacted) is printed against it,
both with 95% intervals, with every disagreement. Each probe offers the tools
the recorded call offered, at temperature 0 (``--temperature none`` sends no
temperature, for a model that refuses one). For a conversation started from a
handoff, the full history is the earlier conversation's archive (carried by the
handoff document, or read from this store) followed by its own messages.

The probes run as a task of their own in the same store
(``fidelity:TASK:CONVERSATION:TIME``), so every probe call is recorded and
priced, and ``cairn cost`` counts it. The model is reached through the openai SDK,
configured from the environment (OPENAI_API_KEY, OPENAI_BASE_URL: any
OpenAI-compatible endpoint).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cairn.admin import conversation_name
from cairn.agent.archive import StoredMessage, iter_history
from cairn.agent.fidelity import DEFAULT_MAX_PROBES, FidelityReport, NothingToProbe
from cairn.agent.providers import default_client
from cairn.errors import CairnError

from ._blobs_option import BlobsOption, blobs_for
from ._consoles import fail, stdout_console
from ._fidelity_task import check_probes, earlier_archive, run_probes
from ._json_output import JsonOption, print_json
from ._store_option import DEFAULT_URL, StoreOption, opened_store
from ._tables import RowTable
from .conversation import NameOption
from .show import TaskArgument, get_task_or_fail


def fidelity_command(
    task_id: TaskArgument,
    model: Annotated[str, typer.Option("--model", "-m", help="The model that decides.")],
    name: NameOption = None,
    max_probes: Annotated[
        int,
        typer.Option(
            "--max-probes", "--probes", help="Probe at most this many turns (a sample beyond)."
        ),
    ] = DEFAULT_MAX_PROBES,
    seed: Annotated[int, typer.Option("--seed", help="The sample's seed.")] = 0,
    baseline: Annotated[
        bool, typer.Option("--baseline/--no-baseline", help="Measure the noise floor.")
    ] = True,
    temperature: Annotated[
        str, typer.Option("--temperature", help="Sent with each probe; 'none' sends none.")
    ] = "0",
    compare: Annotated[
        str,
        typer.Option("--compare", help="'tool': same tool agrees; 'call': same tool and args."),
    ] = "tool",
    store: StoreOption = DEFAULT_URL,
    blobs: BlobsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Agreement between next-tool-call decisions on the full and the compacted
    history, against the noise floor of the full history with itself."""
    if compare not in ("tool", "call"):
        fail(f"--compare must be 'tool' or 'call', not {compare!r}")
    params = _temperature(temperature)
    reader = blobs_for(store, blobs)
    with opened_store(store) as opened:
        get_task_or_fail(opened, task_id)
        conv = conversation_name(opened, task_id, name)
        rows: list[StoredMessage] = list(
            iter_history(opened, task_id, conv, blobs=reader, carried=False)
        )
        try:
            before, origin = earlier_archive(opened, rows, reader)
        except (CairnError, ValueError, KeyError) as exc:
            fail(f"cannot read the archive of the conversation this one was handed off from: {exc}")
    settings: dict[str, Any] = {
        "max_probes": max_probes,
        "seed": seed,
        "baseline": baseline,
        "compare": compare,
    }
    client = _checked(rows, before, settings, f"task {task_id!r}, conversation {conv!r}")
    try:
        report, probe_task = run_probes(
            store, blobs, rows, before, origin, task_id, conv, model, client, params, settings
        )
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        print_json({**report.to_json(), "probe_task": probe_task})
        return
    _print(report, probe_task)


def _checked(
    rows: list[StoredMessage],
    before: list[Any] | None,
    settings: dict[str, Any],
    where: str,
) -> Any:
    """The model client, once the conversation is known to have points to probe
    (nothing to probe exits 1 before any client is made)."""
    try:
        check_probes(rows, before, settings)
    except NothingToProbe as exc:
        fail(f"{where}: {exc}", code=1)
    except ValueError as exc:
        fail(str(exc))
    try:
        return default_client()
    except CairnError as exc:
        fail(str(exc))


SHOWN = 10  # disagreements in the table; --json has them all


def _temperature(text: str) -> dict[str, Any]:
    if text.strip().lower() == "none":
        return {}
    try:
        return {"temperature": float(text)}
    except ValueError:
        fail(f"--temperature must be a number or 'none', not {text!r}")


def _percent(low: float, high: float) -> str:
    return f"{low:.0%}-{high:.0%}"


def _print(report: FidelityReport, probe_task: str) -> None:
    console = stdout_console()
    score = report.score
    console.print(
        f"agreement {score.rate:.0%} ({score.agreements} of {score.probes} probes, "
        f"95% CI {_percent(*score.interval)})"
    )
    if report.baseline is not None:
        floor = report.baseline
        console.print(
            f"noise floor: the full history agrees with itself {floor.rate:.0%} "
            f"({floor.agreements} of {floor.probes}, 95% CI {_percent(*floor.interval)})"
        )
    console.print(f"verdict: {report.verdict}")
    if report.critical is not None:
        console.print(
            f"  the full history agreed with itself at every probe; at probe {report.critical} "
            "the compacted context decided otherwise, and again when asked a second time"
        )
    console.print(
        f"probed {report.probes} of {report.candidates} decision points after a compaction; "
        f"tools: {report.tools}"
        + ("" if report.handoff is None else f"; after a handoff from {report.handoff['task_id']}")
    )
    console.print(f"probe calls recorded as task {probe_task} (see cairn cost --task)")
    if report.disagreements:
        table = RowTable(
            console,
            ("position", "full history", "compacted", "tokens full", "tokens compacted"),
            right=("position", "tokens full", "tokens compacted"),
            free=("full history", "compacted"),
        )
        for d in report.disagreements[:SHOWN]:
            table.add_row(
                str(d.position),
                repr(d.full),
                repr(d.compressed),
                str(d.full_tokens),
                str(d.compressed_tokens),
            )
        table.print()
        hidden = len(report.disagreements) - SHOWN
        if hidden > 0:
            console.print(f"... and {hidden} more disagreement(s); --json lists them all")
