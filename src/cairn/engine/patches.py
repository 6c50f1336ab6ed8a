"""``ctx.patched(name)``: a branch point recorded in the history.

A fix rolled out to tasks already in flight must not change what those tasks
have already done. ``ctx.patched("fix-name")`` answers, at its position:

- True for a task that reaches it on the new code: the answer is recorded
  there (an ``input`` entry named ``patched fix-name``), in one fenced commit
  before it returns, so a task killed at any moment after gets True again;
- False for a task whose recorded history already continues past this
  position with something else (it passed here on the old code): nothing is
  recorded and the position is given back, so the old entry that is there
  replays at the next call.
"""

from __future__ import annotations

from cairn.engine.run import CheckReached, TaskRun, inside_call
from cairn.engine.steps import record_completed
from cairn.names import check_name


def marker(name: str) -> str:
    """The recorded name of patch ``name``'s marker."""
    return f"patched {name}"


def patched(run: TaskRun, name: str) -> bool:
    """Whether the task runs patch ``name``'s new code at this position."""
    check_name("patch name", name)
    seq = run.next_seq()
    inside = inside_call.get()
    if inside is not None and inside[0] is run:
        run.nested(inside[1], "input", marker(name))
    record = run.history.get(seq)
    if record is None:
        if run.checking:
            raise CheckReached(seq)
        record_completed(run, seq, "input", marker(name), "true", run.now())
        return True
    if record.kind == "input" and record.name == marker(name):
        return True
    run.seq = seq - 1  # the task passed here on the old code: the position stays its own
    return False
