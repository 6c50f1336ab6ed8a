"""Cost reports: tokens and estimated cost per task and per batch, from the record.

Every model call (``llm`` entries) records its usage, its estimated cost, and
its counterfactual: the input tokens it would have sent had nothing been
compacted or cleared (``uncompacted_input``, built from the provider's own
counts of each call: see ``Conversation.uncompacted_input``); summarizer calls
(``conv`` entries) record theirs. Summing those gives what was spent and what
compaction saved:

* the gross saving: each call's counterfactual less the input the provider
  counted, priced when the call was made with the conversation's price table
  (``PriceTable.saving``: the input rate, or the cached-input rate when the call
  read from a prompt cache), or re-priced with ``prices``;
* the summarizer's cost: every compaction's calls, failed and rejected ones too
  (a head folded in chunks records each chunk's request in an entry of its own,
  ``cairn.agent.chunked``: each is counted once);
* the net saving: the gross saving less the summarizer's cost.

Calls recorded before counterfactuals were (no ``uncompacted_input``) fall back
to the estimate they recorded (``full_tokens`` less ``context_tokens``). Every
cost is an estimate (see ``cairn.agent.pricing``).

The token counts are the provider's, except where a call's answer carried no
usage (a server that sends none, a stream whose usage chunk was lost): cairn
counted that call's tokens itself and marked its usage ``estimated``. A line
says how much of its tokens is such a count (``tokens estimated``, and
``estimated_note``), so an estimate is never shown as if it were counted.
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

# The columns of a cost line (``CostLine.cells``), shared by ``cairn cost`` and
# the dashboard so that both say the same thing the same way.
COST_COLUMNS = (
    "",
    "calls",
    "compactions",
    "tokens in",
    "cached",
    "tokens out",
    "tokens estimated",
    "est. cost $",
    "saved tokens",
    "gross saved $",
    "summarizer $",
    "net saved $",
    "in without compaction",
)


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
    failed_compactions: int = 0
    summarizer_usage: Usage = field(default_factory=Usage)
    summarizer_cost: float = 0.0
    # The calls whose answer carried no usage, and the tokens cairn counted for them.
    estimated_calls: int = 0
    estimated_usage: Usage = field(default_factory=Usage)

    @property
    def tokens_without_compaction(self) -> int:
        """Input tokens the model calls would have sent had nothing been compacted
        (the summarizer's own calls left out)."""
        return self.usage.input_tokens - self.summarizer_usage.input_tokens + self.saved_tokens

    @property
    def net_saved_cost(self) -> float:
        """The gross saving less what the summarizer cost."""
        return self.saved_cost - self.summarizer_cost

    @property
    def estimated_share(self) -> float:
        """The part of the tokens in and out that cairn counted itself (0 to 1)."""
        total = self.usage.input_tokens + self.usage.output_tokens
        estimated = self.estimated_usage.input_tokens + self.estimated_usage.output_tokens
        return estimated / total if total else 0.0

    def estimated_note(self) -> str | None:
        """What ``cairn cost`` and the dashboard say under a line some of whose
        tokens are cairn's count, not the provider's; None when none are."""
        if not self.estimated_calls:
            return None
        counted = self.estimated_usage
        return (
            f"{self.estimated_calls} model call(s) came back without usage: "
            f"{counted.input_tokens} of the {self.usage.input_tokens} tokens in and "
            f"{counted.output_tokens} of the {self.usage.output_tokens} tokens out "
            f"({_percent(self.estimated_share)} of the tokens) are cairn's estimate, "
            "not the provider's count"
        )

    def add(self, other: CostLine) -> None:
        self.calls += other.calls
        self.compactions += other.compactions
        self.failed_compactions += other.failed_compactions
        self.usage = self.usage + other.usage
        self.cost += other.cost
        self.unpriced_calls += other.unpriced_calls
        self.saved_tokens += other.saved_tokens
        self.saved_cost += other.saved_cost
        self.summarizer_usage = self.summarizer_usage + other.summarizer_usage
        self.summarizer_cost += other.summarizer_cost
        self.unreadable += other.unreadable
        self.estimated_calls += other.estimated_calls
        self.estimated_usage = self.estimated_usage + other.estimated_usage

    def cells(self) -> list[str]:
        """The line as ``cairn cost`` prints it and the dashboard shows it, one
        text per :data:`COST_COLUMNS` column."""
        return [
            self.label,
            str(self.calls),
            str(self.compactions),
            str(self.usage.input_tokens),
            str(self.usage.cached_tokens),
            str(self.usage.output_tokens),
            _percent(self.estimated_share),
            f"{self.cost:.4f}",
            str(self.saved_tokens),
            f"{self.saved_cost:.4f}",
            f"{self.summarizer_cost:.4f}",
            f"{self.net_saved_cost:.4f}",
            str(self.tokens_without_compaction),
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "calls": self.calls,
            "compactions": self.compactions,
            "input_tokens": self.usage.input_tokens,
            "cached_tokens": self.usage.cached_tokens,
            "output_tokens": self.usage.output_tokens,
            "estimated_usage_calls": self.estimated_calls,
            "estimated_input_tokens": self.estimated_usage.input_tokens,
            "estimated_output_tokens": self.estimated_usage.output_tokens,
            "estimated_token_share": round(self.estimated_share, 6),
            "estimated_cost": round(self.cost, 6),
            "unpriced_calls": self.unpriced_calls,
            "saved_tokens": self.saved_tokens,
            "estimated_saved_cost": round(self.saved_cost, 6),
            "tokens_without_compaction": self.tokens_without_compaction,
            "failed_compactions": self.failed_compactions,
            "summarizer_input_tokens": self.summarizer_usage.input_tokens,
            "summarizer_output_tokens": self.summarizer_usage.output_tokens,
            "estimated_summarizer_cost": round(self.summarizer_cost, 6),
            "estimated_net_saved_cost": round(self.net_saved_cost, 6),
        }


def _percent(share: float) -> str:
    """A share as a whole percentage that never shows a part as none or as all."""
    if 0 < share < 0.01:
        return "<1%"
    if 0.99 < share < 1:
        return ">99%"
    return f"{share:.0%}"


def _output(call: RecordedCall) -> dict[str, Any] | None:
    """The entry's output, if it can be read without running code (JSON only)."""
    if call.codec != "json" or call.output is None:
        return None
    try:
        value = json.loads(call.output)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _priced(line: CostLine, output: dict[str, Any], prices: PriceTable | None) -> float:
    """Add the call's usage and cost to ``line``; the cost (0 if unknown)."""
    if "usage" not in output:
        return 0.0
    usage = Usage.from_dict(output["usage"])
    line.usage = line.usage + usage
    if usage.estimated:
        line.estimated_calls += 1
        line.estimated_usage = line.estimated_usage + usage
    cost = output.get("cost") if prices is None else prices.cost(output.get("model"), usage)
    if cost is None:
        line.unpriced_calls += 1
        return 0.0
    line.cost += float(cost)
    return float(cost)


def _saved_tokens(output: dict[str, Any]) -> int:
    """Input tokens the call did not send thanks to compaction and clearing."""
    if "uncompacted_input" in output and "usage" in output:
        sent = int(output["usage"].get("input_tokens", 0))
        return int(output["uncompacted_input"]) - sent
    return int(output.get("full_tokens", 0)) - int(output.get("context_tokens", 0))


def line_of(call: RecordedCall, prices: PriceTable | None) -> CostLine:
    """One recorded call or compaction, as a cost line of its task."""
    line = CostLine(call.task_id)
    output = _output(call)
    if output is None:
        line.unreadable += 1
        return line
    if call.kind == "conv":
        # A part of a compaction folded in chunks (cairn.agent.chunked) is one
        # summarizer request, not a compaction: the compaction's own entry follows.
        if "part" not in output:
            ok = bool(output.get("ok"))
            line.compactions += int(ok)
            line.failed_compactions += int(not ok)
        line.summarizer_cost += _priced(line, output, prices)
        if "usage" in output:
            line.summarizer_usage = line.summarizer_usage + Usage.from_dict(output["usage"])
        return line
    line.calls += 1
    _priced(line, output, prices)
    saved = _saved_tokens(output)
    if saved > 0:
        line.saved_tokens += saved
        cached = int((output.get("usage") or {}).get("cached_tokens", 0))
        recorded = output.get("saved_cost") if prices is None else None
        if recorded is None:
            recorded = (prices or DEFAULT_PRICES).saving(output.get("model"), saved, cached)
        line.saved_cost += float(recorded or 0.0)
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
