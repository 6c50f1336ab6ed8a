"""Cost reports: tokens and estimated cost per task and per batch, from the record.

Every model call (``llm`` entries) records its usage, its estimated cost, and
how many tokens the context would have held without compaction; summarizer
calls (``conv`` entries) record theirs. Summing those gives what was spent and
what compaction saved: the tokens that would have been sent without it, priced
at the model's input rate. All of it is an estimate (see ``cairn.agent.pricing``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cairn.agent.pricing import DEFAULT_PRICES, PriceTable, Usage
from cairn.store.admin import admin
from cairn.store.protocol import Store
from cairn.store.records import RecordedCall


@dataclass
class CostLine:
    """Totals for one task, one batch, or everything."""

    label: str
    calls: int = 0
    compactions: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    unpriced_calls: int = 0
    saved_tokens: int = 0
    saved_cost: float = 0.0
    unreadable: int = 0

    @property
    def tokens_without_compaction(self) -> int:
        """Input tokens that would have been sent had nothing been compacted."""
        return self.usage.input_tokens + self.saved_tokens

    def add(self, other: CostLine) -> None:
        self.calls += other.calls
        self.compactions += other.compactions
        self.usage = self.usage + other.usage
        self.cost += other.cost
        self.unpriced_calls += other.unpriced_calls
        self.saved_tokens += other.saved_tokens
        self.saved_cost += other.saved_cost
        self.unreadable += other.unreadable

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "calls": self.calls,
            "compactions": self.compactions,
            "input_tokens": self.usage.input_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "output_tokens": self.usage.output_tokens,
            "estimated_cost": round(self.cost, 6),
            "unpriced_calls": self.unpriced_calls,
            "saved_tokens": self.saved_tokens,
            "estimated_saved_cost": round(self.saved_cost, 6),
            "tokens_without_compaction": self.tokens_without_compaction,
        }


def _output(call: RecordedCall) -> dict[str, Any] | None:
    """The entry's output, if it can be read without running code (JSON only)."""
    if call.codec != "json" or call.output is None:
        return None
    try:
        value = json.loads(call.output)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _priced(line: CostLine, output: dict[str, Any], prices: PriceTable | None) -> None:
    if "usage" not in output:
        return
    usage = Usage.from_dict(output["usage"])
    line.usage = line.usage + usage
    cost = output.get("cost") if prices is None else prices.cost(output.get("model"), usage)
    if cost is None:
        line.unpriced_calls += 1
    else:
        line.cost += float(cost)


def line_of(call: RecordedCall, prices: PriceTable | None) -> CostLine:
    """One recorded call or compaction, as a cost line of its task."""
    line = CostLine(call.task_id)
    output = _output(call)
    if output is None:
        line.unreadable += 1
        return line
    if call.kind == "conv":
        line.compactions += int(bool(output.get("ok")))
        _priced(line, output, prices)
        return line
    line.calls += 1
    _priced(line, output, prices)
    saved = int(output.get("full_tokens", 0)) - int(output.get("context_tokens", 0))
    if saved > 0:
        line.saved_tokens += saved
        price = (prices or DEFAULT_PRICES).price_of(output.get("model"))
        if price is not None:
            line.saved_cost += saved * price.input / 1e6
    return line


@dataclass
class CostReport:
    """Lines per task (or per batch) and the total."""

    lines: list[CostLine]
    total: CostLine


def cost_report(
    store: Store,
    *,
    batch: str | None = None,
    task_id: str | None = None,
    by_batch: bool = False,
    prices: PriceTable | None = None,
) -> CostReport:
    """Sum the recorded calls of one task, one batch, or the whole store. With
    ``by_batch`` there is one line per batch (tasks outside batches under "-");
    otherwise one per task. ``prices`` re-prices every call instead of using the
    cost recorded at call time."""
    calls = admin(store, "the cost report").recorded_calls(batch=batch, task_id=task_id)
    return summarize(calls, by_batch=by_batch, prices=prices)


def summarize(
    calls: Iterable[RecordedCall], *, by_batch: bool, prices: PriceTable | None
) -> CostReport:
    lines: dict[str, CostLine] = {}
    total = CostLine("total")
    for call in calls:
        label = (call.batch or "-") if by_batch else call.task_id
        one = line_of(call, prices)
        lines.setdefault(label, CostLine(label)).add(one)
        total.add(one)
    return CostReport(list(lines.values()), total)
