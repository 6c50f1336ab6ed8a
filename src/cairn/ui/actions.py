"""The dashboard's buttons: retry, cancel, signal, resolve an operation in doubt,
rerun from a step, the bulk actions on a filter (retry, cancel, rerun), and
raising a batch's budget (which wakes the tasks parked on it).

Each runs the very function the CLI runs (``cairn.admin``), so a refusal says
the CLI's sentence, and each is written to the audit trail as ``ui:NAME``.
Every form carries the server's form secret, checked first. A cancel, a rerun
and a bulk action come from their confirmation page (``cairn.ui.confirm``),
which says how many tasks they touch, and carry its ``confirmed`` field. Done:
the answer is a 303 to the page where the change shows, so a reload does not
post again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from cairn.admin.actions import CANCEL, RETRY, Action, Applied, apply_to_task
from cairn.admin.budgets import budget_scope, raise_budget
from cairn.admin.bulk import apply_to_query, describe_query
from cairn.admin.operations import resolve as resolve_operation
from cairn.admin.reruns import ForkPoint, apply_rerun, plan_rerun, rerun_candidates
from cairn.admin.signals import send_signal
from cairn.ui import guard
from cairn.ui.config import UIConfig
from cairn.ui.filters import BULK_ACTIONS, FILTER_FIELDS, BadQuery, task_query
from cairn.ui.render import href

Form = dict[str, list[str]]
RESOLVE_STATUSES = ("completed", "released", "failed")


@dataclass(frozen=True, slots=True)
class Outcome:
    """A done action (``redirect``: where to go) or a refused one (the page to show)."""

    redirect: str | None = None
    status: int = HTTPStatus.OK
    title: str = ""
    message: str = ""
    back: str = "/"
    # A refusal that a confirmation can overturn: the form to post again (its
    # action, and its fields with ``confirmed`` set), shown under the message.
    confirm_action: str | None = None
    confirm_fields: tuple[tuple[str, str], ...] = ()


def _field(form: Form, name: str) -> str:
    values = form.get(name)
    return values[0] if values else ""


def _refused(status: int, title: str, text: str, back: str = "/") -> Outcome:
    return Outcome(None, status, title, text, back)


def checked(config: UIConfig, form: Form) -> Outcome | None:
    """A refusal if the form does not carry this server's form secret."""
    if guard.same_secret(_field(form, "csrf"), config.csrf):
        return None
    return _refused(HTTPStatus.FORBIDDEN, "Refused", "stale or missing form")


def _task_page(task_id: str) -> str:
    return href("/task", id=task_id)


def _applied(applied: Applied, task_id: str) -> Outcome:
    if applied.task is None and not applied.changed:
        return _refused(HTTPStatus.NOT_FOUND, "Not found", applied.message)
    if not applied.changed:
        status = HTTPStatus.BAD_REQUEST if applied.refused else HTTPStatus.CONFLICT
        return _refused(status, "Nothing done", applied.message, _task_page(task_id))
    return Outcome(redirect=_task_page(task_id))


def _task_action(config: UIConfig, form: Form, action: Action) -> Outcome:
    refusal = checked(config, form)
    if refusal is not None:
        return refusal
    task_id = _field(form, "id")
    keep = _field(form, "keep_children") == "1"
    applied = apply_to_task(
        config.store, action, task_id, config.now(), actor=config.actor(), keep_children=keep
    )
    return _applied(applied, task_id)


def _unconfirmed(form: Form, page: str) -> Outcome | None:
    """A refusal unless the form came from its confirmation page."""
    if _field(form, "confirmed") == "1":
        return None
    text = "confirm first: the confirmation page says how many tasks this touches"
    return _refused(HTTPStatus.BAD_REQUEST, "Not confirmed", text, page)


def retry(config: UIConfig, form: Form) -> Outcome:
    return _task_action(config, form, RETRY)


def cancel(config: UIConfig, form: Form) -> Outcome:
    task_id = _field(form, "id")
    refusal = _unconfirmed(form, href("/confirm", action="cancel", id=task_id))
    return refusal or _task_action(config, form, CANCEL)


def _json(text: str, what: str) -> Any:
    """The JSON value of a form field; empty means null."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f'the {what} is not JSON ({exc}); write e.g. {{"ok": true}}') from None


def signal(config: UIConfig, form: Form) -> Outcome:
    refusal = checked(config, form)
    if refusal is not None:
        return refusal
    task_id = _field(form, "id")
    back = _task_page(task_id)
    try:
        payload = _json(_field(form, "payload"), "payload")
    except ValueError as exc:
        return _refused(HTTPStatus.BAD_REQUEST, "Bad payload", str(exc), back)
    name = _field(form, "name").strip()
    applied = send_signal(config.store, task_id, name, payload, config.now(), actor=config.actor())
    if applied.refused:
        return _refused(HTTPStatus.BAD_REQUEST, "Nothing done", applied.message, back)
    if not applied.changed:
        return _refused(HTTPStatus.CONFLICT, "Nothing done", applied.message, back)
    return Outcome(redirect=back)


def resolve(config: UIConfig, form: Form) -> Outcome:
    refusal = checked(config, form)
    if refusal is not None:
        return refusal
    status = _field(form, "status")
    task_id = _field(form, "task")
    back = _task_page(task_id) if task_id else "/ops"
    if status not in RESOLVE_STATUSES:
        text = f"resolve as one of {', '.join(RESOLVE_STATUSES)}, not {status!r}"
        return _refused(HTTPStatus.BAD_REQUEST, "Bad status", text, back)
    try:
        result = _json(_field(form, "result"), "result")
    except ValueError as exc:
        return _refused(HTTPStatus.BAD_REQUEST, "Bad result", str(exc), back)
    done = resolve_operation(
        config.store,
        _field(form, "scope"),
        _field(form, "key"),
        status,
        result=result,
        permanent=_field(form, "permanent") == "1",
        now=config.now(),
        actor=config.actor(),
        confirmed=_field(form, "confirmed") == "1",
    )
    if not done.found:
        return _refused(HTTPStatus.NOT_FOUND, "Not found", done.message, back)
    if done.needs_confirmation:
        fields = tuple((name, _field(form, name)) for name in sorted(form) if name != "confirmed")
        return Outcome(
            None, HTTPStatus.CONFLICT, "Confirm: the claimant may still act", done.message,
            back, confirm_action="/ops/resolve", confirm_fields=(*fields, ("confirmed", "1")),
        )  # fmt: skip
    if not done.changed:
        return _refused(HTTPStatus.CONFLICT, "Nothing done", done.message, back)
    return Outcome(redirect=back)


def _point(form: Form) -> ForkPoint:
    seq = _field(form, "seq")
    return ForkPoint(step=_field(form, "from") or None, seq=int(seq) if seq else None)


def rerun(config: UIConfig, form: Form) -> Outcome:
    """Rerun one task from a step (from its confirmation page)."""
    refusal = checked(config, form)
    task_id = _field(form, "id")
    back = _task_page(task_id)
    refusal = refusal or _unconfirmed(form, back)
    if refusal is not None:
        return refusal
    task = config.store.get_task(task_id)
    if task is None:
        return _refused(HTTPStatus.NOT_FOUND, "Not found", f"no task {task_id!r}", back)
    try:
        point = _point(form)
    except ValueError as exc:
        return _refused(HTTPStatus.BAD_REQUEST, "Bad rerun", str(exc), back)
    plan = plan_rerun(config.store, [task], point)
    done = apply_rerun(
        config.store, plan, config.now(), target=f"task {task_id}", actor=config.actor()
    )
    if not done.forked:
        text = "; ".join(reason for _, reason in done.left) or "nothing to rerun"
        return _refused(HTTPStatus.CONFLICT, "Nothing done", text, back)
    return Outcome(redirect=back)


def bulk(config: UIConfig, form: Form) -> Outcome:
    """Retry, cancel or rerun every task a filter picks (from its confirmation page)."""
    raw = {name: _field(form, name) for name in (*FILTER_FIELDS, "action", "from", "seq")}
    back = href("/tasks", **{k: raw[k] for k in FILTER_FIELDS})
    refusal = checked(config, form) or _unconfirmed(form, back)
    if refusal is not None:
        return refusal
    try:
        query = task_query(raw, config.now())
        verb = raw["action"]
        if verb == "rerun":
            plan = plan_rerun(config.store, rerun_candidates(config.store, query), _point(form))
            apply_rerun(
                config.store, plan, config.now(), target=describe_query(query),
                actor=config.actor(),
            )  # fmt: skip
            return Outcome(redirect=href("/diff", batch=query.batch) if query.batch else back)
        action = BULK_ACTIONS.get(verb)
        if action is None:
            raise ValueError(f"no such action {verb!r}: retry, cancel or rerun")
    except (BadQuery, ValueError) as exc:
        return _refused(HTTPStatus.BAD_REQUEST, "Bad request", str(exc), back)
    apply_to_query(config.store, action, query, config.now(), actor=config.actor())
    return Outcome(redirect=back)


def _cap(form: Form, name: str, kind: type[float] | type[int]) -> float | int | None:
    text = _field(form, name).strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"the new {name} cap must be a number, not {text!r}") from None


def raise_batch_budget(config: UIConfig, form: Form) -> Outcome:
    """Raise a batch's budget to the caps given (``cairn budget BATCH --raise``)."""
    refusal = checked(config, form)
    if refusal is not None:
        return refusal
    batch = _field(form, "batch")
    back = href("/batch", name=batch)
    try:
        usd = _cap(form, "usd", float)
        tokens = _cap(form, "tokens", int)
        done = raise_budget(
            config.store, budget_scope(batch), config.now(),
            usd=usd, tokens=None if tokens is None else int(tokens), actor=config.actor(),
        )  # fmt: skip
    except ValueError as exc:
        return _refused(HTTPStatus.BAD_REQUEST, "Bad budget", str(exc), back)
    if done.view is None:
        return _refused(HTTPStatus.NOT_FOUND, "Not found", done.message, back)
    return Outcome(redirect=back)
