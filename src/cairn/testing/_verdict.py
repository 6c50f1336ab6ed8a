"""Judging one crash case: did the task survive a crash at this boundary?

A case passes when the resumed task completed, returned what the clean run
returned, left the outside world as the clean run did (if the user said how to
read it), and every step and operation function ran as often as in the clean
run. Two windows are allowed one extra run by nature: a crash after a step's
function returned but before its result was committed runs that step again.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cairn.testing.faults import EXIT_STATUS, OPERATION_POINTS

# The boundary at which a function is about to be called, by kind of entry.
CALL_POINTS = {"before_step": "step", "before_input": "input", "after_claim": "op"}
# Crash here and the entry's function runs again on resume: at-least-once.
WINDOW_POINTS = {"step_returned": "step", "input_returned": "input"}
IN_DOUBT = "cairn.errors.InDoubtOperation"
NON_DETERMINISM = "cairn.errors.NonDeterminismError"


@dataclass(frozen=True, slots=True)
class Event:
    """One boundary a run passed, as logged."""

    point: str
    task_id: str
    seq: int
    name: str


@dataclass(frozen=True, slots=True, order=True)
class Call:
    """A function a task calls: a step's, a recorded input's or an operation's."""

    kind: str
    seq: int
    name: str

    def label(self) -> str:
        return f"{self.kind} {self.name!r} (#{self.seq})"


@dataclass(frozen=True, slots=True)
class Boundary:
    """A point in a task's run where a crash can land; ``occurrence`` counts
    repeats of the same point and entry (a step retried, say)."""

    point: str
    seq: int
    name: str
    occurrence: int = 1

    def label(self) -> str:
        again = f" (#{self.occurrence} time)" if self.occurrence > 1 else ""
        return f"{self.point} {self.name!r}{again}"

    def is_event(self, event: Event) -> bool:
        return (event.point, event.seq, event.name) == (self.point, self.seq, self.name)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one child process left behind."""

    exit_code: int | None
    outcome: dict[str, Any] | None
    events: list[Event]
    output: str

    @property
    def completed(self) -> bool:
        return self.outcome is not None and self.outcome["status"] == "completed"

    def error_text(self) -> str:
        if self.outcome is not None and "error" in self.outcome:
            error = self.outcome["error"]
            return f"{error['type'].rsplit('.', 1)[-1]}: {error['message']}"
        return _exit_text(self.exit_code, self.output)


@dataclass(frozen=True, slots=True)
class CallCount:
    """How often a function ran in a case, against what was expected."""

    call: Call
    count: int
    expected: int


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One row of a crash report."""

    boundary: Boundary
    resumed: str
    calls: tuple[CallCount, ...]
    verdict: str
    ok: bool


def boundaries(events: Iterable[Event]) -> list[Boundary]:
    """Every boundary of a clean run, in order: one crash case each."""
    seen: Counter[tuple[str, int, str]] = Counter()
    found = []
    for event in events:
        where = (event.point, event.seq, event.name)
        seen[where] += 1
        found.append(Boundary(event.point, event.seq, event.name, seen[where]))
    return found


def count_calls(events: Iterable[Event]) -> Counter[Call]:
    """How many times each function was called, read off the boundaries."""
    calls: Counter[Call] = Counter()
    for event in events:
        kind = CALL_POINTS.get(event.point)
        if kind is not None:
            calls[Call(kind, event.seq, event.name)] += 1
    return calls


def case_calls(crashed: RunResult, resumed: RunResult) -> Counter[Call]:
    """Calls over both runs of a case. The crash run's last event is the crash:
    at a "before" point the function was never reached, so it is not counted."""
    events = crashed.events
    if events and events[-1].point in CALL_POINTS:
        events = events[:-1]
    return count_calls(events) + count_calls(resumed.events)


def expected_calls(clean: Counter[Call], boundary: Boundary) -> Counter[Call]:
    expected = Counter(clean)
    kind = WINDOW_POINTS.get(boundary.point)
    if kind is not None:
        expected[Call(kind, boundary.seq, boundary.name)] += 1
    return expected


@dataclass(frozen=True, slots=True)
class Clean:
    """The clean run, which every case is held against."""

    result: str
    effects: Any
    calls: Counter[Call]
    compare_result: bool
    check_effects: bool


def judge(boundary: Boundary, crashed: RunResult, resumed: RunResult, clean: Clean) -> CaseResult:
    """The verdict on one case."""
    calls = case_calls(crashed, resumed)
    expected = expected_calls(clean.calls, boundary)
    counts = tuple(
        CallCount(call, calls[call], expected[call]) for call in sorted(set(calls) | set(expected))
    )
    problem, note = _problem(boundary, crashed, resumed, clean, counts)
    resumed_text = _resumed_text(crashed, resumed)
    if problem is not None:
        return CaseResult(boundary, resumed_text, counts, problem, ok=False)
    return CaseResult(boundary, resumed_text, counts, note, ok=True)


def _crashed_there(boundary: Boundary, crashed: RunResult) -> bool:
    """True if the crash run died by the injected exit, at ``boundary``."""
    return (
        crashed.exit_code == EXIT_STATUS
        and bool(crashed.events)
        and boundary.is_event(crashed.events[-1])
    )


def _resumed_text(crashed: RunResult, resumed: RunResult) -> str:
    """How the resumed run ended, in a word or two."""
    if crashed.exit_code != EXIT_STATUS:
        return "-"
    if resumed.completed:
        return "completed"
    if resumed.outcome is None:
        return "crashed"
    error_type = resumed.outcome["error"]["type"]
    return "in doubt" if error_type == IN_DOUBT else f"failed ({error_type.rsplit('.', 1)[-1]})"


def _problem(
    boundary: Boundary,
    crashed: RunResult,
    resumed: RunResult,
    clean: Clean,
    counts: tuple[CallCount, ...],
) -> tuple[str | None, str]:
    """(what is wrong, or None; the note for a passing case)."""
    if not _crashed_there(boundary, crashed):
        return _not_reached(crashed), ""
    if not resumed.completed:
        return _not_completed(boundary, resumed), ""
    assert resumed.outcome is not None
    if clean.compare_result and resumed.outcome["result"] != clean.result:
        return (
            f"result differs from the clean run: {_short(resumed.outcome['result'])} "
            f"(clean: {_short(clean.result)})",
            "",
        )
    effects_ok = not clean.check_effects or resumed.outcome.get("effects") == clean.effects
    if not effects_ok:
        return _effects_differ(resumed.outcome.get("effects"), clean.effects, counts), ""
    return _call_problem(boundary, counts, clean.check_effects)


def _not_reached(crashed: RunResult) -> str:
    if crashed.exit_code == 0:
        return (
            "the run never reached this boundary: the task takes another path on each run "
            "(read the time, a random number or an outside value with ctx.now(), ctx.random() "
            "or ctx.record())"
        )
    return f"the run ended before this boundary: {crashed.error_text()}"


def _not_completed(boundary: Boundary, resumed: RunResult) -> str:
    error = (resumed.outcome or {}).get("error") or {}
    if error.get("type") == IN_DOUBT:
        which = (
            f"operation {boundary.name!r}" if boundary.point in OPERATION_POINTS else "an operation"
        )
        return (
            f"{which} is left in doubt: the run died between claiming "
            "its key and recording its result, so cairn cannot know whether it acted. Give "
            "ctx.once a reconcile= that asks the outside world, or on_doubt='retry' if the "
            "outside world dedupes the key"
        )
    if resumed.outcome is None:
        return f"the resumed run crashed: {resumed.error_text()}"
    if error.get("type") == NON_DETERMINISM:
        return (
            f"replay went another way: {resumed.error_text()}. Does the task branch on a value "
            "that is not recorded (the time, a random number, an outside read)? Record it "
            "with ctx.now(), ctx.random() or ctx.record()"
        )
    return (
        f"the resumed task failed: {resumed.error_text()}. Does a step read a value that "
        "replay does not restore (a variable set inside another step)? Pass values between "
        "steps through their return values"
    )


def _effects_differ(got: Any, clean: Any, counts: tuple[CallCount, ...]) -> str:
    text = f"outside effects differ from the clean run: {_short(got)} (clean: {_short(clean)})"
    reran = [c.call for c in counts if c.count > 1 and c.call.kind == "step"]
    if reran:
        names = ", ".join(repr(call.name) for call in reran)
        text += (
            f"; step {names} ran again after the crash. A step may run more than once: do its "
            "outside effect with ctx.once(key, fn) so it happens once"
        )
    return text


def _call_problem(
    boundary: Boundary, counts: tuple[CallCount, ...], effects_checked: bool
) -> tuple[str | None, str]:
    notes = []
    for count in counts:
        if count.count == count.expected:
            continue
        deduped_retry = (
            boundary.point == "after_act"
            and count.call.kind == "op"
            and count.call.name == boundary.name
            and count.count == count.expected + 1
        )
        if deduped_retry and effects_checked:
            notes.append(
                f"{count.call.label()} called again with the same key; the outside "
                "effects show it was deduped"
            )
            continue
        if deduped_retry:
            return (
                f"{count.call.label()} ran {count.count} times: on_doubt='retry' called it "
                "again. Give it reconcile=, or pass effects= to show the outside world "
                "dedupes the key",
                "",
            )
        return f"{count.call.label()} ran {count.count} times, expected {count.expected}", ""
    kind = WINDOW_POINTS.get(boundary.point)
    if kind is not None:
        notes.append(f"at-least-once window: {kind} {boundary.name!r} ran twice")
    return None, "; ".join(notes) or "ok"


def _exit_text(exit_code: int | None, output: str) -> str:
    if exit_code is None:
        return "did not finish"
    if exit_code == -signal.SIGALRM:
        return "timed out"
    last = [line for line in output.strip().splitlines() if line.strip()]
    detail = f": {last[-1]}" if last else ""
    return f"process exited with {exit_code}{detail}"


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
