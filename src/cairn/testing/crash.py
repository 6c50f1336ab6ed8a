"""``crash_at_every_step``: crash a task at each of its boundaries, resume, check.

It runs the user's task once, cleanly, logging every boundary the run passes
(see the points in ``cairn.testing``). Then, for each boundary, a *case*: on a
fresh store, a process runs the task and dies with ``os._exit(137)`` exactly
there; a new process resumes it. The case passes when the task completed, its
result equals the clean run's, the outside effects (if an ``effects`` function
reads them) equal the clean run's, and each step and operation function ran as
often as in the clean run: once, or twice for a step crashed after its function
returned and before its result was committed (the at-least-once window).

Every run is a new process, so nothing the task kept in memory survives a
crash, as in real life. The task's module must create its app as ``Cairn()``
without a store argument: each case points ``$CAIRN_STORE`` at its own store.
Each case also runs in a directory of its own (the current directory, and
``$CAIRN_CASE_DIR``), where the task can keep files that stand for the outside
world, such as a ledger its ``effects`` function reads.
"""

from __future__ import annotations

import io
import json
import queue
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from cairn.codec import codec_for
from cairn.errors import CairnError
from cairn.testing._targets import absolute, split
from cairn.testing._verdict import (
    Boundary,
    CaseResult,
    Clean,
    Event,
    RunResult,
    boundaries,
    count_calls,
    judge,
)
from cairn.testing._zygote import Launcher, Request, borrowed

__all__ = ["Boundary", "CaseResult", "CleanRunFailed", "CrashReport", "crash_at_every_step"]

ENTRY = "cairn.testing._case_runner:run_case"
OUTPUT_TAIL_CHARS = 2000


class CleanRunFailed(CairnError):
    """The task did not complete even without a crash, so there is nothing to compare."""


@dataclass(frozen=True, slots=True)
class _Spec:
    """What every run of one crash test shares."""

    target: str
    app: str | None
    kwargs: str
    effects: str | None
    timeout: float


@dataclass(frozen=True, slots=True)
class CrashReport:
    """Every boundary of a task, what a crash there did, and the verdict."""

    target: str
    clean_result: str
    cases: tuple[CaseResult, ...]

    @property
    def ok(self) -> bool:
        """True when the task survived a crash at every boundary."""
        return all(case.ok for case in self.cases)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(case for case in self.cases if not case.ok)

    def table(self, width: int = 140) -> str:
        """The report as a plain-text table, one row per boundary."""
        return _render(self, width)

    def __str__(self) -> str:
        return self.table()


def crash_at_every_step(
    target: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    app: str | None = None,
    effects: str | None = None,
    compare_result: bool = True,
    workers: int = 2,
    timeout: float = 60.0,
    workdir: Path | str | None = None,
    fresh_interpreters: bool = False,
    preload: Sequence[str] = (),
) -> CrashReport:
    """Crash ``target`` at every boundary of a clean run, resume it, and check it.

    Args:
        target: the task, as ``package.module:task`` or ``path/to/file.py:task``.
        kwargs: the task's arguments (values cairn's JSON codec can record).
        app: the ``Cairn`` app, as ``module:app``, if the task's module has several.
        effects: ``module:function`` returning a JSON-able summary of the outside
            world (a ledger's entries, say), called in the case's directory after
            each run; it must equal the clean run's after every crash.
        compare_result: set False for a task whose result differs on every run
            by design (it returns ``ctx.now()``, say).
        workers: cases run this many at a time.
        timeout: seconds one run may take.
        workdir: keep every case's store and files here (default: a temporary
            directory, removed afterwards).
        fresh_interpreters: start every run as a new interpreter rather than a
            fork of one that has imported cairn (slower; the same semantics).
        preload: libraries (module names) the forking process imports once, before
            its first fork, rather than every run importing them: for a framework
            that is slow to import (``["agents", "openai"]``). Each run still
            starts from them as they stand right after the import. Never your
            task's own module, nor one that reads the environment, the working
            directory or the store at import time (each run has its own); a
            preload that starts a thread is refused.
    """
    spec = _Spec(
        target=absolute(target),
        app=None if app is None else absolute(app),
        kwargs=codec_for("json").encode(dict(kwargs or {})),
        effects=None if effects is None else absolute(effects),
        timeout=timeout,
    )
    split(spec.target)
    with _workspace(workdir) as root:
        with borrowed(fresh_interpreters=fresh_interpreters, preload=preload) as launcher:
            first = _run(launcher, spec, root / "clean", "clean", None)
        clean = _clean(first, spec, compare_result)
        found = boundaries(first.events)
        cases = _run_cases(
            found, spec, root, clean, max(1, workers), fresh_interpreters, tuple(preload)
        )
    return CrashReport(target, clean.result, tuple(cases))


@contextmanager
def _workspace(workdir: Path | str | None) -> Iterator[Path]:
    if workdir is not None:
        path = Path(workdir).resolve()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="cairn-crash-") as temporary:
        yield Path(temporary).resolve()


def _clean(first: RunResult, spec: _Spec, compare_result: bool) -> Clean:
    if not first.completed or first.outcome is None:
        raise CleanRunFailed(
            f"the clean run of {spec.target} did not complete, so there is nothing to hold "
            f"the crash cases against: {first.error_text()}\n{first.output[-OUTPUT_TAIL_CHARS:]}"
        )
    return Clean(
        result=first.outcome["result"],
        effects=first.outcome.get("effects"),
        calls=count_calls(first.events),
        compare_result=compare_result,
        check_effects=spec.effects is not None,
    )


def _run_cases(
    found: list[Boundary],
    spec: _Spec,
    root: Path,
    clean: Clean,
    workers: int,
    fresh: bool,
    preload: tuple[str, ...],
) -> list[CaseResult]:
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(found)):
        todo.put(index)
    results: dict[int, CaseResult] = {}

    def work() -> None:
        # One launcher per thread: a zygote runs one child at a time.
        with borrowed(fresh_interpreters=fresh, preload=preload) as launcher:
            while True:
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                results[index] = _case(
                    launcher, spec, root / f"case-{index + 1:03d}", found[index], clean
                )

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(work) for _ in range(min(workers, len(found)))]:
            future.result()
    return [results[index] for index in range(len(found))]


def _case(
    launcher: Launcher, spec: _Spec, case_dir: Path, boundary: Boundary, clean: Clean
) -> CaseResult:
    crashed = _run(launcher, spec, case_dir, "crash", boundary)
    resumed = _run(launcher, spec, case_dir, "resume", None)
    return judge(boundary, crashed, resumed, clean)


def _run(
    launcher: Launcher, spec: _Spec, case_dir: Path, name: str, fault: Boundary | None
) -> RunResult:
    """One process: run (or resume) the task in ``case_dir``, crashing at ``fault``."""
    case_dir.mkdir(parents=True, exist_ok=True)
    store_url = f"sqlite:///{case_dir / 'cairn.db'}"
    events, result, output = (case_dir / f"{name}{end}" for end in (".events", ".json", ".out"))
    run_spec = {
        "target": spec.target,
        "app": spec.app,
        "kwargs": spec.kwargs,
        "effects": spec.effects,
        "store_url": store_url,
        "events": str(events),
        "result": str(result),
        "fault": None if fault is None else _fault_dict(fault),
    }
    request = Request(
        entry=ENTRY,
        spec=run_spec,
        cwd=str(case_dir),
        output=str(output),
        env={"CAIRN_STORE": store_url, "CAIRN_CASE_DIR": str(case_dir)},
        timeout=spec.timeout,
    )
    exit_code = launcher.start(request).wait()
    return RunResult(
        exit_code=exit_code,
        outcome=json.loads(result.read_text()) if result.exists() else None,
        events=_read_events(events),
        output=output.read_text(errors="replace") if output.exists() else "",
    )


def _fault_dict(boundary: Boundary) -> dict[str, Any]:
    return {
        "point": boundary.point,
        "seq": boundary.seq,
        "name": boundary.name,
        "occurrence": boundary.occurrence,
    }


def _read_events(path: Path) -> list[Event]:
    if not path.exists():
        return []
    return [Event(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


# -- the table ---------------------------------------------------------------------------


def _calls_text(case: CaseResult) -> str:
    unusual = [c for c in case.calls if c.count != 1]
    if not unusual:
        return "all once"
    return ", ".join(f"{c.call.name!r} x{c.count}" for c in unusual)


def _render(report: CrashReport, width: int) -> str:
    failed = len(report.failures)
    title = f"crash at every boundary of {report.target}: {len(report.cases)} boundaries, " + (
        f"{failed} FAILED" if failed else "all survived"
    )
    table = Table(title=title, box=box.SIMPLE, title_justify="left", expand=False)
    for column in ("#", "crash at", "seq", "resumed", "calls", "verdict"):
        table.add_column(column, overflow="fold")
    for number, case in enumerate(report.cases, start=1):
        table.add_row(
            str(number),
            case.boundary.label(),
            str(case.boundary.seq),
            case.resumed,
            _calls_text(case),
            case.verdict if case.ok else f"FAIL: {case.verdict}",
        )
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
