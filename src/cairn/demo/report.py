"""The demo's printout: what was killed, what the rerun skipped and ran, the counts.

Lines stay under 80 columns: that is what Rich uses when output is piped.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cairn import BatchReport
from cairn.demo.batch import CONCURRENCY, STEPS, DemoFiles
from cairn.demo.check import KillSnapshot, Verdict
from cairn.demo.worker import KillResult

SIMULATED = "The agent and the ad platform are simulated (no network, no LLM)."
AGENT_STEPS = ("analyze", "propose")


def intro(console: Console, files: DemoFiles, batch: str, apps: int, seed: int) -> None:
    console.print(f"[bold]cairn demo[/]: review the ad settings of {apps} apps, crash, run again")
    console.print(f"[yellow]{SIMULATED}[/]")
    console.print(f"  batch    {batch}: {apps} apps, one task each")
    console.print(f"  steps    {' -> '.join(STEPS)}")
    console.print("           (analyze, propose: the agent; apply: changes the ad platform)")
    console.print(f"  workdir  {files.workdir}")
    console.print(f"  seed     {seed} (picks the moment of the kill)")


def cleared(console: Console, paths: list[Path]) -> None:
    console.print(f"  [dim]removed the last demo's {', '.join(path.name for path in paths)}[/]")


def run1_starts(console: Console, pid: int) -> None:
    console.print()
    console.print(
        f"[bold]Run 1[/]: a worker process (pid {pid}) runs the batch, "
        f"{CONCURRENCY} tasks at a time."
    )


def run1(console: Console, kill: KillResult, snap: KillSnapshot, apps: int) -> None:
    total = apps * len(STEPS)
    if kill.killed:
        console.print(
            f"  [red]SIGKILL[/] at {kill.seconds:.2f} s, when {snap.steps_logged} of {total} "
            f"steps had finished ({100 * snap.steps_logged // total}%)."
        )
    else:
        console.print(
            f"  [red]The worker ended by itself (exit code {kill.returncode}) before it "
            "could be killed; see worker.log in the workdir.[/]"
        )
    console.print(
        f"  The store then: {snap.completed} tasks complete, {snap.in_flight} in flight, "
        f"{snap.counts.get('pending', 0)} not started."
    )
    ended = {status: n for status, n in snap.counts.items() if status in ("failed", "cancelled")}
    if ended:
        console.print(f"  [red]Also: {', '.join(f'{n} {s}' for s, n in ended.items())}.[/]")


def run2_starts(console: Console) -> None:
    console.print()
    console.print("[bold]Run 2[/]: the same batch again, on the same store, in this process.")


def run2(console: Console, report: BatchReport, snap: KillSnapshot, verdict: Verdict) -> None:
    console.print(f"  skipped  {report.skipped} tasks, already finished")
    console.print(
        f"  resumed  {len(snap.resumable)} tasks mid-way: {snap.replayable_steps} steps "
        "replayed from the record"
    )
    fresh = f"  fresh    {snap.fresh} tasks from step 1"
    if snap.in_flight_fresh:
        fresh += f" ({snap.in_flight_fresh} had been in flight, nothing recorded)"
    console.print(fresh)
    console.print(f"  ran      {sum(verdict.run2_by_step.values())} steps")
    console.print(
        f"  batch    {verdict.batch_completed}/{verdict.batch_total} tasks completed "
        f"(run 2 took {report.elapsed_seconds:.1f} s)"
    )
    for failure in report.failures[:3]:
        message = (failure.message.splitlines() or [""])[0][:100]
        console.print(f"  [red]failed: {failure.task_id}: {failure.error_type}: {message}[/]")


def step_table(verdict: Verdict) -> Table:
    table = Table(title="Runs of each step function (it counts itself)")
    for column in ("step", "run 1", "run 2", "total", "expected"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step in STEPS:
        first, second = verdict.run1_by_step[step], verdict.run2_by_step[step]
        table.add_row(step, str(first), str(second), str(first + second), str(verdict.apps))
    return table


def outcome(console: Console, verdict: Verdict) -> None:
    console.print()
    console.print(step_table(verdict))
    expected = len(verdict.expected)
    if verdict.once == expected and not verdict.repeated:
        console.print(f"[bold green]every step ran exactly once: {verdict.once}/{expected}[/]")
    else:
        _explain_step_runs(console, verdict)
    calls = sum(n for (_, step), n in verdict.runs.items() if step in AGENT_STEPS)
    console.print(
        f"agent: {calls} simulated LLM calls made, {len(AGENT_STEPS) * verdict.apps} needed"
    )
    _ledger(console, verdict)


def _explain_step_runs(console: Console, verdict: Verdict) -> None:
    console.print(
        f"[bold red]steps that ran exactly once: {verdict.once}/{len(verdict.expected)}[/]"
    )
    for (task_id, step), runs in sorted(verdict.repeated.items()):
        console.print(f"  [red]{task_id} {step} ran {runs} times[/]")
    if verdict.repeated:
        console.print(
            "  Why: the kill came between the end of that step's work and the commit\n"
            "  of its checkpoint, a window of well under a millisecond per step. cairn\n"
            "  runs a step at least once. Side effects such as apply go through\n"
            "  ctx.once with an operation key, which keeps them to once even there."
        )
    for task_id, step in verdict.missing:
        console.print(f"  [red]{task_id} {step} never ran[/]")


def _ledger(console: Console, verdict: Verdict) -> None:
    # ``calls`` counts the claims of a key, not what the platform did: a kill
    # during apply's call, before the platform acted, leaves the key claimed; in
    # run 2 reconcile finds no change at the platform, so cairn claims it again
    # and calls once more. That key has two claims and one effect: the line
    # says so, so that a second call beside "every step ran exactly once" reads
    # as the design, not a failure. What the platform did is its ledger, below.
    keys = len(verdict.op_calls)
    again = sum(n > 1 for n in verdict.op_calls.values())
    head = f"apply: one operation key per app ({keys} key{_s(keys)})"
    if not again:
        console.print(f"{head}, each called once")
    else:
        # No "N of M called once": beside a passing run it reads as a shortfall.
        # The line leads with what happened and why, the ledger line confirms it.
        took = "it took" if again == 1 else "they took"
        console.print(f"{head}; {again} took a second call, by design:")
        console.print(
            f"  the kill cut {'its' if again == 1 else 'their'} first call off before the "
            "platform acted, so run 2\n"
            f"  asked the platform (reconcile), found no change, and {took} the call\n"
            "  the platform never got. No change reached it twice, as its ledger shows:"
        )
    applied, apps = verdict.applied_once, verdict.apps
    if applied == len(verdict.applies) == apps:
        console.print(f"ad platform: each app's settings applied exactly once ({applied}/{apps})")
        return
    console.print(f"[red]ad platform: {applied}/{apps} apps had settings applied exactly once[/]")
    for app_id, n in sorted(verdict.applies.items()):
        if n != 1:
            console.print(f"  [red]{app_id} applied {n} times[/]")


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def footer(console: Console, seconds: float, store: Path) -> None:
    console.print()
    console.print(f"Total {seconds:.1f} s. Store: {store}")
    console.print("Look at what it holds (the dashboard needs pip install 'cairn-durable\\[ui]'):")
    console.print(f"  cairn ui --store {shlex.quote(str(store))}", soft_wrap=True)
    console.print(f"  cairn tasks --store {shlex.quote(str(store))}", soft_wrap=True)
