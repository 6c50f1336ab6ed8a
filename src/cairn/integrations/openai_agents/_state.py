"""What one durable Agents SDK run shares between its model and its tools.

The SDK starts the function tools of one model response together
(``asyncio.gather``). cairn keys every entry by its position in the task's
history, so the tool entries must take their positions in the same order on
every run: the ``Turnstile`` lets them start one by one, in the order the
(recorded) response lists them, and each lets the next start as soon as its
own entry has its position; they then run side by side.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents import ModelResponse

from cairn.agent.pricing import PriceTable
from cairn.errors import CairnError
from cairn.retry import Retry

if TYPE_CHECKING:
    from cairn.context import Context
    from cairn.engine.run import TaskRun


class Turnstile:
    """Lets tool calls start in a fixed order of their call ids."""

    def __init__(self, ids: list[str]) -> None:
        self._next = dict(itertools.pairwise(ids))
        self._events = {call_id: asyncio.Event() for call_id in ids}
        if ids:
            self._events[ids[0]].set()

    async def wait_for(self, call_id: str) -> None:
        """Wait until the calls listed before ``call_id`` have started. A call the
        response does not list (no function call of its own) does not wait."""
        event = self._events.get(call_id)
        if event is not None:
            await event.wait()

    def started(self, call_id: str) -> None:
        """``call_id`` has its position: the next call may start."""
        following = self._next.get(call_id)
        if following is not None:
            self._events[following].set()


@dataclass
class RunState:
    """One ``run()``: the task's context, and where its model turns are."""

    ctx: Context
    retry: Retry
    prices: PriceTable
    parallel_tools: bool = False
    turn: int = 0  # model responses so far in this run
    # A cairn error a tool's entry raised (in doubt, non-determinism, the store):
    # the SDK turns what a tool raises into its own UserError, so run() raises this.
    failure: CairnError | None = None
    turnstile: Turnstile = field(default_factory=lambda: Turnstile([]))

    @property
    def run(self) -> TaskRun:
        return self.ctx._run

    def model_returned(self, response: ModelResponse) -> None:
        """A response (live or recorded) came back: its tool calls go next."""
        self.turn += 1
        ids = [
            str(getattr(item, "call_id", ""))
            for item in response.output
            if getattr(item, "type", None) == "function_call"
        ]
        self.turnstile = Turnstile(ids)
