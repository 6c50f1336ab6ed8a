"""What one durable Agents SDK run shares between its model and its tools.

The SDK starts the function tools of one model response together
(``asyncio.gather``), and may leave some of them out (a handoff in the same
response, a guardrail that refuses a call). cairn keys every entry by its
position in the task's history, so the positions must not depend on the order
in which the tools happen to start: when a response comes back (live or from
the record) its function calls are given the next positions, in the order the
response lists them, and each tool's entry takes the position of its call id.
A call the SDK never makes leaves its position unused; replay is the same
either way, since the response is recorded.

By default the tools of one response then run one after the other (a lock), so
a crash finds at most one in flight; with ``parallel_tools=True`` they run side
by side, and a crash finds every one in flight, each run again on resume if it
had not recorded yet.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents import ModelResponse

from cairn.agent.pricing import PriceTable
from cairn.errors import CairnError
from cairn.retry import Retry

if TYPE_CHECKING:
    from cairn.context import Context
    from cairn.engine.run import TaskRun


@dataclass
class RunState:
    """One ``run()``: the task's context, and where its model turns are."""

    ctx: Context
    retry: Retry
    prices: PriceTable
    parallel_tools: bool = False
    turn: int = 0  # model responses so far in this run
    # The positions reserved for the function calls of the latest response.
    positions: dict[str, int] = field(default_factory=dict)
    one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)
    # A cairn error a tool's entry raised (in doubt, non-determinism, the store):
    # the SDK turns what a tool raises into its own UserError, so run() raises this.
    failure: CairnError | None = None

    @property
    def run(self) -> TaskRun:
        return self.ctx._run

    def model_returned(self, response: ModelResponse) -> None:
        """A response (live or recorded) came back: reserve its function calls'
        positions, in the order it lists them."""
        self.turn += 1
        ids = [
            str(getattr(item, "call_id", ""))
            for item in response.output
            if getattr(item, "type", None) == "function_call"
        ]
        run = self.run
        first = run.seq + 1
        self.positions = {}
        for offset, call_id in enumerate(ids):
            self.positions.setdefault(call_id, first + offset)
        run.seq += len(ids)

    def position_of(self, call_id: str) -> int | None:
        """The position reserved for ``call_id`` (None: the next one, for a call
        the response did not list)."""
        return self.positions.pop(call_id, None)
