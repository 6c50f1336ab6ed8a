"""Tool approvals that survive a crash: each pending approval a durable wait.

A function tool with ``needs_approval`` stops an Agents SDK run before it is
called: ``Runner.run`` returns with ``result.interruptions`` (one
``ToolApprovalItem`` per pending call), and the caller approves or rejects
each on ``result.to_state()`` and runs again from that state. Done in memory,
a crash loses the pending approval and whoever was to give it.

With ``run(..., approvals="wait")`` cairn turns each pending approval into
``ctx.wait_for("approve TOOL CALL_ID")``: the task is suspended (holding no
process) until a person sends that signal (``cairn signal TASK "approve
refund call_1" true``, or ``app.signal``), then the run goes on from the
SDK's state with the decision applied, until no approval is pending. Killed
at any point, the task replays: the recorded model responses bring the same
interruptions back, the recorded signal the same decision, and the approved
tool runs once (its entry keeps the position its call was given, ``_state``).

A signal's payload is the decision: ``true`` or ``{"approve": true}``
approves; ``false`` or ``{"approve": false, "message": "..."}`` rejects (the
model is told ``message``, or the SDK's default rejection). With
``approval_timeout``, no decision in that time rejects the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents import RunResult, RunState, ToolApprovalItem

from cairn.context import Context
from cairn.errors import ConfigurationError

APPROVALS = ("return", "wait")


def approval_name(item: ToolApprovalItem) -> str:
    """The signal that decides ``item``: ``approve TOOL CALL_ID``."""
    return f"approve {item.tool_name or item.name} {item.call_id}"


def check_approvals(approvals: str) -> None:
    if approvals not in APPROVALS:
        raise ConfigurationError(
            f"run(approvals={approvals!r}): give 'return' (the SDK's interruptions come "
            "back to you) or 'wait' (each pending approval is a durable ctx.wait_for)"
        )


def settled(ctx: Context, result: RunResult, timeout: float | None) -> RunState[Any] | None:
    """The SDK's state with a decision applied to each approval ``result``
    stopped at, waiting durably for each (the task is suspended until it
    comes); None when no approval is pending."""
    pending = list(result.interruptions)
    if not pending:
        return None
    state = result.to_state()
    for item in pending:
        name = approval_name(item)
        signal = ctx.wait_for(name, timeout=timeout)
        if signal.timed_out:
            state.reject(item, rejection_message=f"not approved within {timeout:g} seconds")
            continue
        approve, message = decision(name, signal.payload)
        if approve:
            state.approve(item)
        else:
            state.reject(item, rejection_message=message)
    return state


def decision(name: str, payload: Any) -> tuple[bool, str | None]:
    """(approve, rejection message) from the payload of signal ``name``."""
    if isinstance(payload, bool):
        return payload, None
    if isinstance(payload, Mapping) and isinstance(payload.get("approve"), bool):
        message = payload.get("message")
        return bool(payload["approve"]), None if message is None else str(message)
    raise ConfigurationError(
        f"signal {name!r} carries {payload!r}: an approval is true, false, or "
        '{"approve": true|false, "message": "..."}'
    )
