"""The ``cairn`` command line: run workers, look at batches, tasks and operations,
retry, cancel, and break things on purpose (demo, chaos).

Every command that reads a store takes ``--store URL`` (or ``$CAIRN_STORE``). Bad
input (an unknown URL scheme, a file that is not a cairn store, one written by a
newer cairn, an unknown task, and any cairn or driver error a command lets
through: ``_errors.CairnGroup``) prints one red line and exits with code 2.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cairn import __version__
from cairn.store import DEFAULT_URL

from ._errors import CairnGroup
from .audit import audit_command
from .backup import backup_command
from .batches import batches_command
from .budget import budget_command
from .cancel import cancel_command
from .chaos import chaos_command
from .check import check_command
from .conversation import conversation_command
from .cost import cost_command
from .demo import demo_command
from .diff import diff_command
from .enqueue import enqueue_command
from .fidelity import fidelity_command
from .logs import logs_command
from .metrics import metrics_command
from .move import export_command, import_command
from .ops import ops_app
from .otel import otel_command
from .priority import priority_command
from .prune import gc_command, prune_command
from .report import report_command
from .rerun import rerun_command
from .retry import retry_command
from .schedules import schedules_command
from .show import show_command
from .signal import signal_command
from .tail import tail_command
from .tasks import tasks_command
from .ui import ui_command
from .versions import versions_command
from .watch import watch_command
from .worker import migrate_command, worker_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="cairn",
    help=(
        "Run long AI-agent batches durably; look at them, retry and cancel tasks.\n\n"
        "Commands that read a store take --store URL, or read it from the environment "
        f"variable CAIRN_STORE (default: {DEFAULT_URL}). demo and chaos make stores of "
        "their own and never read CAIRN_STORE."
    ),
    no_args_is_help=True,
    cls=CairnGroup,
    add_completion=False,
    # Tracebacks are for cairn's own bugs; never print local variables (task args may be secret).
    pretty_exceptions_show_locals=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"cairn {__version__}")
        raise typer.Exit


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print cairn's version and exit.",
        ),
    ] = False,
) -> None:
    """Options before any command."""


app.command("batches")(batches_command)
app.command("tasks")(tasks_command)
app.command("show")(show_command)
app.command("logs")(logs_command)
app.command("check")(check_command)
app.command("versions")(versions_command)
app.command("retry")(retry_command)
app.command("cancel")(cancel_command)
app.command("rerun")(rerun_command)
app.command("diff")(diff_command)
app.command("audit")(audit_command)
app.command("signal")(signal_command)
app.command("priority")(priority_command)
app.command("demo")(demo_command)
app.command("chaos")(chaos_command)
app.add_typer(ops_app, name="ops")
app.command("worker")(worker_command)
app.command("enqueue")(enqueue_command)
app.command("migrate")(migrate_command)
app.command("schedules")(schedules_command)
app.command("conversation")(conversation_command)
app.command("cost")(cost_command)
app.command("budget")(budget_command)
app.command("fidelity")(fidelity_command)
app.command("backup")(backup_command)
app.command("export")(export_command)
app.command("import")(import_command)
app.command("prune")(prune_command)
app.command("gc")(gc_command)
app.command("metrics")(metrics_command)
app.command("watch")(watch_command)
app.command("tail")(tail_command)
app.command("report")(report_command)
app.command("otel-export")(otel_command)
app.command("ui")(ui_command)


def main() -> None:
    """Entry point of the ``cairn`` script."""
    app()
