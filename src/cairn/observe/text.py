"""Metrics as short plain text: for the terminal, chat messages and the daily report."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cairn.observe.metrics import BatchTime, Metrics


def pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def secs(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.2f}s"
    minutes, seconds = divmod(int(value), 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def short_type(error_type: str) -> str:
    """An error type as people read it: ``ValueError`` for ``builtins.ValueError``."""
    return error_type.removeprefix("builtins.")


def first_line(message: str, limit: int = 160) -> str:
    """The first non-blank line of ``message``, cut to ``limit`` characters."""
    line = next((part.strip() for part in message.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def recorded_error(text: str | None) -> tuple[str, str] | None:
    """(type, message) of a recorded error (``cairn.engine.errortext``), or None."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return str(value.get("type") or "?"), str(value.get("message") or "")


# A readable key is cut to this many characters.
KEY_SHOWN = 80


def readable_key(item_key: str | None, args: str | None, codec: str) -> str | None:
    """A task's item key as people gave it: the key itself when it is readable,
    or, when cairn had to hash it (``sha256:…``: odd characters, long or nested
    arguments), its JSON arguments as ``name=value`` pairs; None if neither can
    be shown. Cut to ``KEY_SHOWN`` characters: a label, never an id."""
    if item_key is None:
        return None
    if not item_key.startswith("sha256:"):
        return item_key
    if codec != "json" or args is None:
        return None
    try:
        value = json.loads(args)
    except ValueError:
        return None
    if not isinstance(value, dict) or not value:
        return None
    text = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
        for k, v in sorted(value.items())
    )
    text = " ".join(text.split())
    return text if len(text) <= KEY_SHOWN else text[: KEY_SHOWN - 1] + "…"


def task_label(task_id: str, item_key: str | None, args: str | None, codec: str) -> str:
    """How an alert names a task: its readable key first, the id after it in
    parentheses (``url=a b (crawl/sha256:…)``), or the id alone when no key
    can be shown or the id already ends with it (``crawl/n=7``)."""
    key = readable_key(item_key, args, codec)
    return task_id if key is None or task_id.endswith(key) else f"{key} ({task_id})"


def moment(iso: str) -> str:
    """A recorded ISO time for people: ``2026-05-24 06:00:07 UTC`` (to the second)."""
    try:
        parsed = datetime.fromisoformat(iso).astimezone(UTC)
    except ValueError:
        return iso
    return parsed.strftime("%Y-%m-%d %H:%M:%S UTC")


def in_words(seconds: float) -> str:
    """A duration for people: ``45 seconds``, ``17 minutes``, ``2 hours 5 minutes``,
    ``3 days 4 hours`` (two units at most, rounded down)."""
    whole = max(int(seconds), 0)
    units = [("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)]
    parts = []
    for unit, size in units:
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts[:2]) or "0 seconds"


def metrics_lines(m: Metrics) -> list[str]:
    """Every metric, one fact per line."""
    r, o, t = m.restarts, m.redundancy, m.retries
    counts = ", ".join(f"{s} {n}" for s, n in sorted(m.tasks_by_status.items())) or "no tasks"
    lines = [
        f"tasks: {counts}",
        f"restart success: {pct(r.restart_success_rate)} "
        f"({r.completed_after_interruption} of {r.interrupted_tasks} interrupted tasks "
        f"completed; {r.interruptions} interruptions)",
        f"suspect re-runs of completed steps: {r.suspect_reruns} "
        f"(in {r.suspect_rerun_tasks} interrupted tasks)",
        f"redundant execution: {pct(o.redundant_execution_rate)} "
        f"({o.redundant_keys} of {o.operation_keys} operation keys called more than once)",
        f"retries: {t.task_retries} task, {t.step_retries} step "
        f"({t.step_calls} step calls, {t.failed_steps} steps failed)",
    ]
    if m.failures_by_type:
        failures = ", ".join(f"{k} {v}" for k, v in sorted(m.failures_by_type.items()))
        lines.append(f"failed tasks by error: {failures}")
    lines += [_batch_line(b) for b in m.batches]
    lines += [
        f"step {s.name}: n={s.count} p50 {secs(s.p50)} p90 {secs(s.p90)} p99 {secs(s.p99)}"
        for s in m.steps
    ]
    if m.usage is not None:
        u = m.usage
        lines.append(
            f"model calls: {u.calls}, tokens in {u.input_tokens} out {u.output_tokens}, "
            f"est. ${u.estimated_cost:.4f}, context kept {pct(u.context_compression_ratio)} "
            f"of {u.tokens_without_compaction} tokens"
        )
    return lines + [f"note: {note}" for note in m.notes]


def _batch_line(b: BatchTime) -> str:
    if b.wall_clock_seconds is None:
        return f"batch {b.name}: {b.tasks} tasks, {b.unfinished} unfinished"
    ratio = "" if b.vs_family_median is None else f", {b.vs_family_median:.2f}x"
    return (
        f"batch {b.name}: {b.tasks} tasks in {secs(b.wall_clock_seconds)} "
        f"(median of {b.family}: {secs(b.family_median_seconds)}{ratio})"
    )
