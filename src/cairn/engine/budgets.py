"""Budgets around one model call: reserve before it, settle after, park when refused.

The budgets a call counts against are found once per run: the batch's, the
task's own and each ancestor's (a spawned child's spend is its parent's too),
where the store has one. A refused reservation parks the task: it is moved to
waiting, holding no process, in the same transaction that checks the budget
was not raised since it refused (so a raise either finds it parked and wakes
it, or comes first and the call asks again). Once woken it replays to the
same call, which asks again. Alerts are logged once per budget and raise
(``cairn.budget``), their once-ness kept in the store.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cairn.budgets import batch_scope, nanos_to_usd, task_scope
from cairn.errors import Suspended
from cairn.store.records import BudgetRecord, BudgetRefused

if TYPE_CHECKING:
    from cairn.engine.run import TaskRun

log = logging.getLogger("cairn.budget")


@dataclass(frozen=True, slots=True)
class Hold:
    """A call's reservation on the budgets it counts against."""

    permit: str
    scopes: tuple[str, ...]
    usd_nanos: int
    tokens: int


def declare(run: TaskRun) -> None:
    """Make the task's own budget in the store, if its task has one, as it starts
    (before it spawns anything: its children count against it)."""
    budget = run.budget
    if budget is not None:
        run.store.declare_budget(
            task_scope(run.task_id), budget.usd_nanos, budget.tokens, budget.warn, run.now()
        )


def scopes_of(run: TaskRun) -> tuple[str, ...]:
    """The budgets ``run``'s model calls count against (found once per run)."""
    if run.budget_scopes is not None:
        return run.budget_scopes
    store = run.store
    candidates = [batch_scope(run.batch)] if run.batch else []
    task_id: str | None = run.task_id
    seen: set[str] = set()
    while task_id is not None and task_id not in seen:
        seen.add(task_id)
        candidates.append(task_scope(task_id))
        record = store.get_task(task_id)
        task_id = None if record is None else record.parent_id
    found = [(s, store.get_budget(s)) for s in candidates]
    run.budget_scopes = tuple(s for s, budget in found if budget is not None)
    run.budget_in_usd = any(b is not None and b.usd_nanos is not None for _, b in found)
    return run.budget_scopes


def reserve(run: TaskRun, usd_nanos: int, tokens: int) -> Hold | None:
    """Reserve a call's worst case on its budgets; None when it has none. A
    refusal parks the task (``Suspended``): nothing is sent."""
    scopes = scopes_of(run)
    if not scopes:
        return None
    permit = uuid.uuid4().hex
    while True:
        now = run.now()
        answer = run.store.reserve_budget(
            scopes,
            permit,
            run.limits.owner,
            run.task_id,
            usd_nanos,
            tokens,
            now,
            now + run.limits.lease,
        )
        if not isinstance(answer, BudgetRefused):
            return Hold(permit, answer, usd_nanos, tokens)
        _alert(run, answer.scope, "reached", _refusal_text(answer, usd_nanos, tokens))
        needed = json.dumps({"usd_nanos": usd_nanos, "tokens": tokens})
        if run.store.park_task(run.task_id, run.fence, answer.scope, answer.raised, needed, now):
            log.info("task %r parked on budget %r", run.task_id, answer.scope)
            raise Suspended(run.task_id, f"budget {answer.scope}")
        run.check_still_ours()  # not parked: the fence moved, or the budget was raised


def settle(run: TaskRun, hold: Hold, usd_nanos: int, tokens: int) -> None:
    """The call ended having used ``usd_nanos`` and ``tokens``; warn once if a
    budget has passed its warning share."""
    run.store.settle_budget(hold.scopes, hold.permit, usd_nanos, tokens)
    for scope in hold.scopes:
        budget = run.store.get_budget(scope)
        if budget is not None and budget.warned_at is None and _over_warning(budget):
            _alert(run, scope, "warned", _warning_text(budget))


def _over_warning(budget: BudgetRecord) -> bool:
    shares = []
    if budget.usd_nanos:
        shares.append(budget.spent_usd_nanos / budget.usd_nanos)
    if budget.tokens:
        shares.append(budget.spent_tokens / budget.tokens)
    return max(shares, default=0.0) >= budget.warn_at


def _alert(run: TaskRun, scope: str, which: str, text: str) -> None:
    if run.store.mark_budget_alert(scope, which, run.now()):
        log.warning("%s", text)


def _refusal_text(refused: BudgetRefused, usd_nanos: int, tokens: int) -> str:
    if refused.measure == "usd":
        spent = f"${nanos_to_usd(refused.spent):.6f} of ${nanos_to_usd(refused.cap):.6f}"
        need = f"${nanos_to_usd(usd_nanos):.6f}"
    else:
        spent, need = f"{refused.spent} of {refused.cap} tokens", f"{tokens} tokens"
    kind, _, name = refused.scope.partition(":")
    command = f"cairn budget {name}" if kind == "batch" else f"cairn budget --task {name}"
    return (
        f"budget {refused.scope!r} reached: {spent} spent or reserved; a call needing "
        f"{need} did not start and its task parks. Raise it to go on: {command} --raise ..."
    )


def _warning_text(budget: BudgetRecord) -> str:
    parts = []
    if budget.usd_nanos:
        usd = nanos_to_usd(budget.spent_usd_nanos)
        parts.append(f"${usd:.6f} of ${nanos_to_usd(budget.usd_nanos):.6f}")
    if budget.tokens:
        parts.append(f"{budget.spent_tokens} of {budget.tokens} tokens")
    return (
        f"budget {budget.scope!r} passed {budget.warn_at:.0%} of its cap: {', '.join(parts)} spent"
    )
