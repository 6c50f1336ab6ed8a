"""``cairn demo``: run the simulated review batch, kill it, resume it, show the proof."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo_command(
    apps: Annotated[int, typer.Option("--apps", min=1, help="How many apps to review.")] = 30,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed for the simulation (default: random).")
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="Where the demo keeps its store (default: a temp dir)."),
    ] = None,
) -> None:
    """Run a batch against a simulated agent, SIGKILL it part way, and resume it."""
    # Imported here so the other commands never load the demo's simulation code.
    from cairn.demo import run_demo

    raise typer.Exit(run_demo(workdir, apps=apps, seed=seed))
