"""What a replay does at an entry whose code changed since it was recorded.

A recorded entry carries a fingerprint of what produced it (``code:<hash>``
for a step; ``model:<name> system:<hash> tools:<hash>`` for a model call). When
the code asks for the same name at the same position but its fingerprint
differs, the task's ``on_change`` policy decides (docs/versions.md):

- ``fail`` (the default): stop with ``CodeChanged``, naming the entry and what
  changed; nothing is overwritten.
- ``rerun``: mark this step and every later completed step to be run again, in
  one fenced write, so a crash halfway through the re-run still re-runs the
  rest. Operations (``ctx.once``), recorded inputs and model calls keep their
  records: a changed model call under ``rerun`` stops like ``fail``.
- ``keep``: replay the recorded result, and write the current fingerprint into
  the entry's ``kept`` column once, so ``cairn show`` says so.

A dry replay (``cairn check``) raises ``Diverged`` instead, whatever the policy.
Only reached when fingerprints differ: the hot path never enters this module.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from cairn.errors import CairnControl, CodeChanged
from cairn.store.records import StepRecord

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun
    from cairn.engine.steps import EntryLabel

log = logging.getLogger("cairn")


class Diverged(CairnControl):
    """A dry replay found an entry whose code changed: where, and how."""

    def __init__(self, seq: int, label: str, recorded: str, current: str, what: str) -> None:
        super().__init__(f"{label}: {what}")
        self.seq = seq
        self.label = label
        self.recorded = recorded
        self.current = current
        self.what = what


_PARTS = {
    "code": "its code",
    "model": "the model",
    "system": "the system text",
    "tools": "the tools",
}


def what_changed(recorded: str, current: str) -> str:
    """Which parts of two fingerprints differ, in words: "its code changed",
    "the system text changed, the tools changed"."""
    old = dict(part.partition(":")[::2] for part in recorded.split())
    new = dict(part.partition(":")[::2] for part in current.split())
    keys = list(new) + [key for key in old if key not in new]
    changed = [f"{_PARTS.get(key, key)} changed" for key in keys if old.get(key) != new.get(key)]
    return ", ".join(changed) or "its fingerprint changed"


def _resendable(record: StepRecord) -> bool:
    """A completed ``ctx.llm_call`` entry (its output holds the reply message),
    not a conversation's call (whose reply is a row of the conversation)."""
    try:
        output = json.loads(record.output or "null")
    except ValueError:
        return False
    return isinstance(output, dict) and "message" in output and "idx" not in output


def _may_resend(run: TaskRun, record: StepRecord) -> bool:
    return run.rerun_models and record.kind == "llm" and _resendable(record)


def _model_calls_from(run: TaskRun, seq: int) -> list[int]:
    """The ``ctx.llm_call`` entries at ``seq`` and after: sent again with
    ``rerun_models``, as their input may come from a step run again."""
    return sorted(
        at
        for at, record in run.history.items()
        if at >= seq and record.kind == "llm" and record.status == "completed"
        and _resendable(record)
    )  # fmt: skip


def changed(run: TaskRun, record: StepRecord, what: EntryLabel) -> StepRecord:
    """The record to go on with at a changed entry: the recorded one (replayed,
    ``keep``), the same marked to run again (``rerun``), or raise."""
    current = what.fingerprint or ""
    recorded = record.fingerprint or ""
    if record.kept == current:
        return record  # kept across this very change before: the choice stands
    how = what_changed(recorded, current)
    if run.checking:
        raise Diverged(what.seq, str(what), recorded, current, how)
    policy = run.on_change
    if policy == "keep":
        run.write(record._replace(kept=current))
        log.warning(
            "task %s: %s changed (%s); on_change='keep' replays its recorded result",
            run.task_id,
            what,
            how,
        )
        return record
    if policy == "rerun" and (what.kind == "step" or _may_resend(run, record)):
        calls = _model_calls_from(run, what.seq) if run.rerun_models else []
        run.rerun_steps(what.seq, calls)
        log.info(
            "task %s: %s changed (%s); on_change='rerun' runs it and later steps again",
            run.task_id,
            what,
            how,
        )
        return run.history[what.seq]
    if policy == "rerun" and not run.rerun_models:
        how += "; on_change='rerun' sends a model call again only with rerun_models=True"
    elif policy == "rerun":
        how += (
            "; a conversation's model call is never sent again (its reply is in the conversation)"
        )
    run.poisoned = CodeChanged(
        task_id=run.task_id,
        seq=what.seq,
        label=str(what),
        recorded=recorded,
        current=current,
        changed=how,
    )
    raise run.poisoned
