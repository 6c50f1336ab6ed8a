"""``cairn chaos``: SIGKILL a batch at random moments, resume it, audit the store."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Annotated

import typer

from cairn.errors import CairnError

from ._consoles import fail, note
from ._json_output import JsonOption, print_json

BUILTIN = "cairn.chaos.batch:run"


# The options of `cairn chaos`, named here so its signature reads as a list.
TargetOption = Annotated[
    str,
    typer.Option(
        "--target",
        metavar="MODULE:FUNCTION",
        help="A function that takes a store URL and runs your batch to its end "
        "(default: cairn's built-in chaos batch).",
    ),
]
KillsOption = Annotated[int, typer.Option("--kills", min=1, help="How many SIGKILLs.")]
SeedOption = Annotated[
    int | None, typer.Option("--seed", help="Picks the kill moments (default: random).")
]
ChaosStoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="The store to run on (default: a new SQLite file in the workdir). "
        "CAIRN_STORE is never read: chaos must not run on your real store by accident.",
    ),
]
TasksOption = Annotated[
    int | None,
    typer.Option(
        "--tasks", min=1, help="Tasks in the built-in batch (default: 8 per kill, min 20)."
    ),
]
MaxDelayOption = Annotated[
    float,
    typer.Option("--max-delay-ms", min=0, help="Each kill lands up to this long after progress."),
]
WorkdirOption = Annotated[
    Path | None,
    typer.Option("--workdir", help="Where the log and outputs go (default: a temp dir)."),
]


def chaos_command(
    target: TargetOption = BUILTIN,
    kills: KillsOption = 50,
    seed: SeedOption = None,
    store: ChaosStoreOption = None,
    tasks: TasksOption = None,
    max_delay_ms: MaxDelayOption = 50.0,
    workdir: WorkdirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Kill a batch at random moments, resume it each time, and report what was lost.

    Exits 1 on any lost step, duplicate effect, unfinished task or failed restart.
    """
    # Imported here so the other commands never load the chaos runner.
    from cairn.chaos import run_chaos

    if tasks is not None and target != BUILTIN:
        fail("--tasks sizes the built-in batch only; size your own batch in your target")
    chosen_seed = seed if seed is not None else random.randrange(1_000_000)
    note(f"chaos: {kills} kills of {target} (seed {chosen_seed})")
    try:
        report = run_chaos(
            target,
            store=store,
            kills=kills,
            seed=chosen_seed,
            max_delay=max_delay_ms / 1000,
            tasks=tasks,
            workdir=workdir,
        )
    except CairnError as exc:
        fail(str(exc))
    if as_json:
        print_json(report.to_dict())
    else:
        sys.stdout.write(report.table())
    raise typer.Exit(report.exit_code)
