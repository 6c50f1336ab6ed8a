"""``cairn check MODULE:APP``: would the current code replay the tasks in flight?

Every unfinished task's recorded history is replayed against MODULE:APP's code
without calling any step, operation or model call for a recorded position and
without writing anything (``cairn.versions.check_app``). Each task is reported
compatible, or with its first divergence: the position, the entry, the recorded
and the current fingerprint, and the recorded tokens and cost a re-run from
there would repeat. Exit code 1 if any task diverges.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cairn.errors import CairnError
from cairn.versions import TaskCheck, check_app

from ._consoles import fail, note, stdout_console
from ._json_output import JsonOption, print_json
from ._tables import RowTable
from .worker import AppStoreOption, load_app

_COLUMNS = ("task", "verdict", "position", "entry", "recorded", "current", "tokens", "est. $")


def check_command(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where the app is.")],
    batch: Annotated[
        str | None, typer.Option("--batch", "-b", help="Only the tasks of this batch.")
    ] = None,
    store: AppStoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay every unfinished task against MODULE:APP's current code, calling
    nothing and writing nothing; report the tasks the change reaches and what a
    re-run from there would repeat. Exit code 1 if any task diverges."""
    app = load_app(target)
    if store is not None:
        app.use_store(store)
    try:
        with app:
            checks = check_app(app, batch)
    except CairnError as exc:
        fail(str(exc))
    broken = [check for check in checks if not check.ok]
    if as_json:
        print_json({"tasks": [check.to_json() for check in checks], "diverged": len(broken)})
    else:
        _print(checks, broken)
    if broken:
        raise typer.Exit(1)


def _print(checks: list[TaskCheck], broken: list[TaskCheck]) -> None:
    if not checks:
        note("no unfinished tasks of this app")
        return
    if broken:
        view = RowTable(stdout_console(), _COLUMNS, right=("position", "tokens", "est. $"))
        for check in broken:
            replay, cost = check.replay, check.repeated
            view.add_row(
                replay.task.id,
                replay.verdict,
                str(replay.seq),
                f"{replay.label}: {replay.what}",
                replay.recorded,
                replay.current,
                str(cost.usage.input_tokens + cost.usage.output_tokens),
                f"{cost.cost:.4f}",
            )
        view.print()
    unprinted = sum(1 for check in checks if check.replay.unprinted)
    note(f"{len(checks) - len(broken)} of {len(checks)} unfinished task(s) compatible")
    if unprinted:
        note(
            f"{unprinted} task(s) hold steps recorded before fingerprints (schema 3): "
            "those steps cannot be compared and were taken as compatible"
        )
