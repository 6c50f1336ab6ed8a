"""What ``cairn fidelity`` runs: the earlier archive of a handed-off conversation,
and the probes as a task of their own, so that their calls are recorded and priced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cairn.admin import FIDELITY_TASK, fidelity_task_id
from cairn.agent.archive import StoredMessage, iter_history, reader_of
from cairn.agent.fidelity import (
    FidelityReport,
    decision_of,
    fidelity,
    nothing_to_probe,
    same_tool,
)
from cairn.agent.fidelity_points import handoff_origin, recorded_points
from cairn.agent.handoff import handoff_archive
from cairn.agent.messages import Message
from cairn.app import Cairn
from cairn.blobs import BlobStore
from cairn.clock import SystemClock
from cairn.context import Context
from cairn.store.protocol import Store


def earlier_archive(
    store: Store, rows: Sequence[StoredMessage], blobs: BlobStore | None
) -> tuple[list[Message] | None, dict[str, Any] | None]:
    """For a conversation started from a handoff: the messages of the one it came
    from (the archive the document carried, else that conversation in this store,
    up to the handoff) and the handoff's origin; (None, None) for any other."""
    origin = handoff_origin(rows)
    if origin is None:
        return None, None
    reader = reader_of(store, blobs)
    if "archive" in origin:
        return handoff_archive(origin, reader.load), origin
    task_id, name = origin.get("task_id"), origin.get("conversation")
    upto = int((origin.get("counts") or {}).get("rows", 0))
    earlier = (
        []
        if not isinstance(task_id, str) or not isinstance(name, str)
        else [
            r
            for r in iter_history(store, task_id, name, blobs=reader, carried=False)
            if r.idx < upto
        ]
    )
    if not earlier:
        raise ValueError(
            f"it was started from a handoff of task {task_id!r}, whose archive is neither "
            "in the handoff document nor in this store; hand off with "
            "conv.handoff(archive='inline') (or 'blob') to carry it"
        )
    return [r.message for r in earlier if r.kind == "message"], origin


def check_probes(
    rows: Sequence[StoredMessage], before: list[Message] | None, settings: dict[str, Any]
) -> None:
    """Raise ``NothingToProbe`` if the conversation has no point to probe (before
    any model client is made or any task written)."""
    cap, seed = int(settings["max_probes"]), int(settings["seed"])
    points, candidates, _ = recorded_points(rows, cap=cap, seed=seed, before=before)
    if not points:
        raise nothing_to_probe(candidates)


def run_probes(
    store_url: str,
    blobs_url: str | None,
    rows: list[StoredMessage],
    before: list[Message] | None,
    origin: dict[str, Any] | None,
    task_id: str,
    conv: str,
    model: str,
    client: Any,
    params: dict[str, Any],
    settings: dict[str, Any],
) -> tuple[FidelityReport, str]:
    """Run the probes as task ``fidelity:TASK:CONV:TIME`` of the store (each probe
    one recorded ``ctx.llm_call``); the report and that task's id. Nothing to
    probe raises ``NothingToProbe`` before any task is made."""
    cap, seed = int(settings["max_probes"]), int(settings["seed"])
    same = same_tool if settings["compare"] == "tool" else None
    made: list[FidelityReport] = []
    app = Cairn(store_url, blobs=blobs_url)
    try:

        @app.task(name=FIDELITY_TASK)
        def probe(ctx: Context, task: str, conversation: str, model: str) -> dict[str, Any]:
            def decide(messages: list[Message], tools: Any = None, label: str = "probe") -> Any:
                reply = ctx.llm_call(
                    messages, model=model, tools=tools or None, client=client, name=label, **params
                )
                return decision_of(reply.message)

            report = fidelity(
                rows,
                None,
                decide,
                max_probes=cap,
                seed=seed,
                baseline=bool(settings["baseline"]),
                before=before,
                handoff=origin,
                same=same,
            )
            made.append(report)
            return report.to_json()

        stamp = SystemClock().now().strftime("%Y%m%dT%H%M%S.%fZ")
        probe_id = fidelity_task_id(task_id, conv, stamp)
        app.run(probe, task_id=probe_id, task=task_id, conversation=conv, model=model)
    finally:
        app.close()
    return made[0], probe_id
