"""``CairnDurability``: the capability that makes a Pydantic AI agent durable in cairn.

Built on Pydantic AI's own durable-execution base, as its Temporal, DBOS and
Prefect capabilities are: the base wraps the agent's model and toolsets and
routes every model request and tool call through an operation backend; cairn's
backend (``_backend``) makes each one an entry of the running task. An agent
run inside a cairn task (``await agent.run(...)`` in an ``@app.task``) is then
replayed from the record when the task resumes after a crash.

The run's first entry is the agent definition's fingerprint (``_fingerprint``):
a resume with another definition stops with ``AgentDefinitionChanged``. Tool
calls run one after the other inside a task, so each takes the same position
on every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalOperationNamer,
    RoleBasedOperationConfig,
    ToolsetKind,
    conversation_id_from_run_id,
)

# Not among durable_exec's exports: whether a unit's body is running (a
# delegate agent inside a tool's entry).
from pydantic_ai.durable_exec._operation_backend import in_durable_unit
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_ai.toolsets import ToolsetTool

from cairn.agent.pricing import DEFAULT_PRICES, PriceTable
from cairn.context import current_context
from cairn.errors import ConfigurationError
from cairn.integrations.pydantic_ai._backend import CairnOperationBackend, Recording, UnitConfig
from cairn.integrations.pydantic_ai._fingerprint import check_agent
from cairn.retry import Retry

OutsideTask = Literal["raise", "run"]


@dataclass(init=False, kw_only=True)
class CairnDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable by recording its model requests and tool calls in
    the cairn task it runs in.

    ``Agent('openai:gpt-4o-mini', name='researcher', capabilities=[CairnDurability()])``,
    then ``await agent.run(...)`` inside an ``@app.task``. Each model request is
    an ``llm`` entry (priced with ``prices`` for ``cairn cost``, retried with
    ``retry``, default the app's step policy); each tool call a step, or, for a
    tool whose metadata says ``{'cairn': {'once': True}}``, an operation through
    ``ctx.once`` (with ``'reconcile'`` and ``'on_doubt'`` as ``ctx.once`` takes
    them). ``outside_task``: what a run outside any cairn task does,
    ``"raise"`` (a ``ConfigurationError``) or ``"run"`` (an ordinary run,
    recorded nowhere).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="cairn",
        durable_unit_noun="entry",
        durable_unit_plural="entries",
        durable_container_noun="task",
        codec=JSON_CODEC,  # cairn's entries are JSON: values reduced by Pydantic AI's adapters
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        # cairn keys entries by position: tools started together would take
        # positions in whatever order they happened to start.
        sequential_tools_in_durable_context=True,
        tool_config_key="cairn",
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        name: str | None = None,
        prices: PriceTable | None = None,
        retry: Retry | None = None,
        outside_task: OutsideTask = "raise",
    ) -> None:
        if outside_task not in ("raise", "run"):
            raise ConfigurationError(
                f"CairnDurability(outside_task=...) is 'raise' or 'run', not {outside_task!r}"
            )
        super().__init__(models=models, name=name)
        self._recording = Recording(prices or DEFAULT_PRICES, retry)
        self._outside_task = outside_task

    @property
    def in_durable_context(self) -> bool:
        # Inside another entry's body (a tool delegating to an agent that is
        # durable too), the delegate runs as part of that entry: its usage is
        # recorded with the tool's, and replayed with it.
        return current_context() is not None and not in_durable_unit()

    def get_default_run_id(self) -> str | None:
        ctx = current_context()
        if ctx is None or in_durable_unit():
            return None
        return f"cairn:{ctx.task_id}:{ctx._run.seq + 1}"  # the position the run starts at

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    def get_durable_operation_backend(self) -> DurableOperationBackend[UnitConfig]:
        def tool_config(
            operation_id: DurableOperationId, tool: object | None, tool_name: str
        ) -> UnitConfig | Literal[False]:
            resolve = self._build_resolve_tool_config({})
            config = resolve(tool if isinstance(tool, ToolsetTool) else None, tool_name)
            return False if config is False else dict(config)

        config: RoleBasedOperationConfig[UnitConfig] = RoleBasedOperationConfig(
            model={}, event={}, capability={}, tool={}, resolve_tool=tool_config
        )
        return CairnOperationBackend(
            recording=self._recording,
            namer=JournalOperationNamer(
                self.name, default_model_id=self.default_model_id or "default"
            ),
            config=config,
        )

    def _toolset_base_config(self, kind: ToolsetKind) -> Any:
        return {}

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        task = current_context()
        if task is None and not in_durable_unit() and self._outside_task == "raise":
            raise ConfigurationError(
                f"agent {self.name!r} has CairnDurability but was run outside a cairn task: "
                "call agent.run() inside a function decorated with @app.task (each model "
                "request and tool call is recorded there), or make it "
                "CairnDurability(outside_task='run') to run it unrecorded out there"
            )
        if task is not None and self.in_durable_context and self.agent is not None:
            check_agent(task, self.agent)
        return await super().wrap_run(ctx, handler=handler)
