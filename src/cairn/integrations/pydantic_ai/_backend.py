"""Pydantic AI's durable operations as recorded cairn entries.

``CairnOperationBackend`` is the ``DurableOperationBackend`` that
``CairnDurability`` hands Pydantic AI: every operation the agent runs through
it (a model request, a tool call, a toolset's discovery) is one history entry of
the running task. A model request is an ``llm`` entry carrying the response as
Pydantic AI's own type adapter dumps it (JSON, never pickle), its usage and its
estimated cost, so ``cairn cost`` counts it like any ``ctx.llm`` call; anything
else is a step, or, for a tool marked ``{'cairn': {'once': True}}``, an
operation through ``ctx.once``'s machine.

Every entry also records what its body added to the run's usage
(``ctx.usage``): a tool that delegates to another agent with
``usage=ctx.usage`` adds the delegate's tokens there. A replay returns the
recorded result without running the body, so it adds the recorded delta back:
the run's usage after a resume is the usage of a run that was never killed.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import TypeAdapter
from pydantic_ai.durable_exec import (
    BoundDurableOperation,
    CallableOperationBackend,
    DurableOperation,
    DurableOperationId,
    ModelRequestId,
    ToolsetCallToolId,
    durable_unit_scope,
    record_durable_unit,
)
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RunUsage

from cairn.agent.metering import framework_meter
from cairn.agent.pricing import PriceTable
from cairn.agent.pricing import Usage as CairnUsage
from cairn.agent.provider_errors import behind_framework
from cairn.context import Context, current_context
from cairn.engine.once import OncePolicy, OnDoubt, once_machine
from cairn.engine.run import adrive
from cairn.engine.steps import EntryLabel, record_completed, step_machine
from cairn.errors import ConfigurationError
from cairn.keys import bounded_key
from cairn.redaction import register_from
from cairn.retry import NO_RETRY, Retry

if TYPE_CHECKING:
    from cairn.engine.meter import Meter
    from cairn.engine.run import TaskRun

ParamsT = TypeVar("ParamsT")
WireT = TypeVar("WireT")
ResultT = TypeVar("ResultT")

SCOPE = "pydantic-ai"
UnitConfig = dict[str, Any]
_USAGE: TypeAdapter[RunUsage] = TypeAdapter(RunUsage)
_KEY: ContextVar[str | None] = ContextVar("cairn_pydantic_ai_operation_key", default=None)


def operation_key() -> str | None:
    """Inside a ``{'cairn': {'once': True}}`` tool's call: its operation key, to
    pass on as the outside system's idempotency key (or to look for in
    ``reconcile``). None elsewhere."""
    return _KEY.get()


@dataclass
class Recording:
    """What the entries of one agent share: how model calls are retried and priced."""

    prices: PriceTable
    retry: Retry | None


def run_context_of(params: object) -> RunContext[Any] | None:
    """The run context an operation's parameters carry (``ctx`` for toolset
    operations, ``run_context`` for model and event ones), if any."""
    for field in ("ctx", "run_context"):
        found = getattr(params, field, None)
        if isinstance(found, RunContext):
            return found
    return None


def _model_fields(value: object, model_name: str, recording: Recording) -> dict[str, Any]:
    """cairn's fields of an ``llm`` entry (read by ``cairn cost``), from the
    response as the codec dumped it."""
    usage = value.get("usage") if isinstance(value, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    cairn_usage = CairnUsage(
        int(usage.get("input_tokens", 0)),
        int(usage.get("output_tokens", 0)),
        int(usage.get("cache_read_tokens", 0)),
    )
    return {
        "provider": "pydantic-ai",
        "model": model_name,
        "usage": cairn_usage.to_dict(),
        "cost": recording.prices.cost(model_name, cairn_usage),
        "finish_reason": value.get("finish_reason") if isinstance(value, dict) else None,
    }


def _meter(run: TaskRun, model: str, recording: Recording, params: object) -> Meter | None:
    """A model request's token limit (the app's for its provider, the part of a
    "provider:model" name before the colon, and its model) and budgets: what it
    reserves is its messages counted as JSON text, plus its max_tokens."""
    provider, _, bare = model.rpartition(":")
    settings = getattr(params, "model_settings", None)
    max_tokens = settings.get("max_tokens") if isinstance(settings, dict) else None
    return framework_meter(
        run,
        provider=provider or "pydantic-ai",
        model=bare,
        prices=recording.prices,
        prompt=lambda: getattr(params, "messages", params),
        max_tokens=max_tokens,
    )


class CairnOperationBackend(CallableOperationBackend[UnitConfig]):
    """Runs each bound operation as an entry of the task ``current_context()``
    names (the base's ``execute`` contract, plus the usage delta and the entry
    kind, which need the operation's parameters: so ``bind`` is cairn's own)."""

    def __init__(self, *, recording: Recording, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._recording = recording

    def bind(
        self, operation: DurableOperation[ParamsT, WireT, ResultT]
    ) -> BoundDurableOperation[ParamsT, WireT, ResultT]:
        async def dispatch(params: ParamsT, explicit_config: object | None) -> ResultT:
            label = operation.invocation_label(params) if operation.invocation_label else None
            name = self._namer.invocation_name(operation.operation_id, label=label).operation_name
            base = self._config.base(operation.config_role, operation_id=operation.operation_id)
            config = explicit_config if isinstance(explicit_config, dict) else base
            unit = _Unit(operation, params, self._recording)
            recorded = await self._record(
                operation.operation_id, name, unit.body, config or {}, unit.run_context, params
            )
            unit.replay_usage(recorded, name)
            record_durable_unit(executed=unit.ran)
            return operation.result_codec.load(recorded["value"])

        return _Bound(operation, dispatch)

    async def _record(
        self,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[..., Awaitable[dict[str, Any]]],
        config: UnitConfig,
        run_context: RunContext[Any] | None,
        params: object = None,
    ) -> dict[str, Any]:
        ctx = _task_context(name)
        run = ctx._run
        if isinstance(operation_id, ModelRequestId):
            retry = self._recording.retry or ctx._default_step_retry
            meter = _meter(run, operation_id.model_name, self._recording, params)
            label = f"pydantic-ai {name}"
            machine = step_machine(run, "llm", label, body, (), {}, retry, limit=meter)
        elif isinstance(operation_id, ToolsetCallToolId) and config.get("once"):
            call_id = run_context.tool_call_id if run_context is not None else None
            key = bounded_key(f"{SCOPE}/{ctx.task_id}/{run.seq + 1}/{call_id or name}")
            policy = OncePolicy(
                retry=NO_RETRY,
                scope=SCOPE,
                reconcile=_reconcile_for(config),
                on_doubt=_on_doubt(config),
            )
            machine = once_machine(run, key, body, (), {}, policy)
        else:
            machine = step_machine(run, "step", name, body, (), {}, ctx._default_step_retry)
        recorded: dict[str, Any] = await adrive(machine, run.clock)
        return recorded

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: UnitConfig,
    ) -> object:
        """The base's contract, for a caller that goes around ``bind``: ``body``
        as one step (its usage is not measured: it carries no parameters)."""

        async def recorded_body() -> dict[str, Any]:
            return {"value": await body()}

        recorded = await self._record(operation_id, name, recorded_body, config, None)
        return recorded["value"]


class _Unit(Generic[ParamsT, WireT, ResultT]):
    """One call of an operation: its body as the entry runs it (measuring what
    it adds to the run's usage), and what a replay of its record puts back."""

    def __init__(
        self,
        operation: DurableOperation[ParamsT, WireT, ResultT],
        params: ParamsT,
        recording: Recording,
    ) -> None:
        self.operation = operation
        self.params = params
        self.recording = recording
        self.run_context = run_context_of(params)
        # The model's client's key: never stored (cairn.redaction).
        register_from(getattr(self.run_context, "model", None))
        self.ran = False  # the body ran (live), rather than its record being returned

    async def body(self, *key: str) -> dict[str, Any]:
        """The entry's function: ``key`` is the operation key under ``ctx.once``."""
        usage = self.run_context.usage if self.run_context is not None else None
        before = copy.copy(usage)
        token = _KEY.set(key[0] if key else None)
        try:
            with durable_unit_scope():
                result = await self.operation.handler(self.params)
        except Exception as exc:
            mapped = self._provider_error(exc)
            if mapped is None:
                raise
            raise mapped from None
        finally:
            _KEY.reset(token)
        self.ran = True
        value = self.operation.result_codec.dump(result)
        recorded: dict[str, Any] = {"value": value}
        if usage is not None and before is not None:
            delta = usage - before
            if delta.has_values() or delta.requests:
                recorded["usage_delta"] = _USAGE.dump_python(delta, mode="json")
        operation_id = self.operation.operation_id
        if isinstance(operation_id, ModelRequestId):
            fields = _model_fields(value, operation_id.model_name, self.recording)
            recorded = {**fields, **recorded}
        return recorded

    def _provider_error(self, error: Exception) -> Exception | None:
        """A model request's SDK error (Pydantic AI raises its own, chained to
        it) as cairn's, redacted and classified as ``ctx.llm``'s are; None for
        anything else, which goes up as it is."""
        if not isinstance(self.operation.operation_id, ModelRequestId):
            return None
        return behind_framework(error, provider="pydantic-ai")

    def replay_usage(self, recorded: dict[str, Any], name: str) -> None:
        """Put back what a replayed body had added to the run's usage, and write
        (once) the entry that counts a tool's own model requests."""
        if "usage_delta" not in recorded:
            return
        delta = _USAGE.validate_python(recorded["usage_delta"])
        if not self.ran and self.run_context is not None:
            self.run_context.usage.incr(delta)
        if delta.requests and not isinstance(self.operation.operation_id, ModelRequestId):
            _record_delegated(name, delta, self.recording)


def _record_delegated(name: str, delta: RunUsage, recording: Recording) -> None:
    """The model requests a tool made (a delegate agent's, say) as one ``llm``
    entry after the tool's own, so ``cairn cost`` counts their tokens: written
    once, replayed (and never written again) on every later run."""
    run = _task_context(name)._run
    seq = run.next_seq()
    label = f"pydantic-ai requests of {name}"
    if run.replayed(seq, "llm", label) is not None:
        return
    usage = CairnUsage(delta.input_tokens, delta.output_tokens, delta.cache_read_tokens)
    fields = {
        "provider": "pydantic-ai",
        "model": "(delegated)",
        "usage": usage.to_dict(),
        # Pydantic AI prices what it can; otherwise the call counts as unpriced.
        "cost": float(delta.cost) if delta.cost is not None else None,
        "finish_reason": None,
        "requests": delta.requests,
    }
    what = EntryLabel("llm", label, seq)
    record_completed(run, seq, "llm", label, run.encode(fields, what), run.now())


def _on_doubt(config: UnitConfig) -> OnDoubt:
    on_doubt = config.get("on_doubt", "raise")
    if on_doubt == "raise" or on_doubt == "retry":
        return on_doubt  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"a tool's {{'cairn': {{'on_doubt': ...}}}} is 'raise' or 'retry', not {on_doubt!r}"
    )


def _reconcile_for(config: UnitConfig) -> Callable[[str], Any] | None:
    """The tool's ``reconcile(key)``, its answer wrapped as the entry records it
    (None: the call did not happen, call it again)."""
    reconcile = config.get("reconcile")
    if reconcile is None:
        return None
    if not callable(reconcile):
        raise ConfigurationError(
            f"a tool's {{'cairn': {{'reconcile': ...}}}} must be a function of the "
            f"operation key, not {reconcile!r}"
        )

    def settle(key: str) -> Any:
        found = reconcile(key)
        if found is None:
            return None
        # What the tool returned, in the shape Pydantic AI records a plain return.
        return {"value": {"kind": "tool_return", "result": found}}

    return settle


def _task_context(name: str) -> Context:
    ctx = current_context()
    if ctx is None:  # in_durable_context said yes, so this is a bug, not bad input
        raise ConfigurationError(f"pydantic-ai {name}: no cairn task is running here")
    return ctx


class _Bound(BoundDurableOperation[ParamsT, WireT, ResultT]):
    def __init__(
        self,
        operation: DurableOperation[ParamsT, WireT, ResultT],
        dispatch: Callable[[ParamsT, object | None], Awaitable[ResultT]],
    ) -> None:
        self._operation = operation
        self._dispatch = dispatch

    @property
    def operation(self) -> DurableOperation[ParamsT, WireT, ResultT]:
        return self._operation

    async def __call__(self, params: ParamsT, *, config: object | None = None) -> ResultT:
        return await self._dispatch(params, config)
