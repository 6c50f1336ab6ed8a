"""``Context``: what a task function uses to checkpoint its work.

Everything a task records is keyed by its position in the task's history. On
resume the task function runs again from the top, and each call below returns
the recorded value instead of doing the work again.

Sync and async: ``ctx.step(name, fn)`` returns the value when ``fn`` is a plain
function, and an awaitable when ``fn`` is an ``async def``; the same goes for
``ctx.record``. ``ctx.sleep`` blocks; ``await ctx.asleep`` suspends.
"""

from __future__ import annotations

import inspect
import random as _random
import sys
import uuid as _uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from cairn.engine import fanout as _fanout
from cairn.engine.children import ChildTask, join_machine, spawn
from cairn.engine.config import EngineConfig
from cairn.engine.once import OncePolicy, OnDoubt, Reconcile, before_send, once_machine
from cairn.engine.patches import patched
from cairn.engine.run import TaskRun, adrive, current, drive, in_event_loop
from cairn.engine.steps import run_step, sleep_machine, step_machine
from cairn.engine.waits import Signal, seconds_of, wait_for
from cairn.errors import ConfigurationError
from cairn.keys import KeyPart, bounded_key, run_key
from cairn.limits import LimitRef, split_ref
from cairn.names import check_name
from cairn.retry import NO_RETRY, Retry

if TYPE_CHECKING:
    from cairn.agent.conversation import Conversation
    from cairn.app import Cairn
    from cairn.task import TaskDef

T = TypeVar("T")


def current_context() -> Context | None:
    """The context of the task running in this thread or coroutine, if any."""
    found: Context | None = current.get()
    return found


def _is_async(fn: Callable[..., Any]) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        # The fast answer for plain functions and methods: asked once per step.
        return bool(code.co_flags & inspect.CO_COROUTINE)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - async callable objects count too
    )


def _outside_context(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, called with no current task context: an item of a map is a step,
    so a ``@cairn.step`` function used as one must run plainly, not checkpoint
    itself a second time at a position of its own."""
    if _is_async(fn):

        async def acall(*args: Any) -> Any:
            token = current.set(None)
            try:
                return await fn(*args)
            finally:
                current.reset(token)

        return acall

    def call(*args: Any) -> Any:
        token = current.set(None)
        try:
            return fn(*args)
        finally:
            current.reset(token)

    return call


def _misused(call: str, name: object, fn: object) -> ConfigurationError:
    """The error for ``ctx.step`` called without a name first or with something that
    cannot be called, naming the line that called it. A ``ConfigurationError``: no
    retry policy retries it, since the code, not the moment, is wrong."""
    caller = sys._getframe(2)  # the task code that called ctx.step
    where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    if not isinstance(name, str):
        problem = f"its first argument is {_shown(name)}, not the step's name"
    else:
        problem = f"its second argument is {_shown(fn)}, not a function to call"
    return ConfigurationError(
        f'{call}(...) at {where}: {problem}. Write {call}("fetch", fetch, *args): a name '
        "that stays the same across runs, then the function and its arguments."
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ctx.once with every default: one policy, made once (it is frozen).
_PLAIN_ONCE = OncePolicy(retry=NO_RETRY)


class Context:
    """Handed to every task function as its first argument."""

    def __init__(self, run: TaskRun, default_step_retry: Retry, app: Cairn | None = None) -> None:
        self._run = run
        self._default_step_retry = default_step_retry
        self._app = app

    @property
    def task_id(self) -> str:
        """The id of the running task."""
        return self._run.task_id

    @property
    def batch(self) -> str | None:
        """The batch this task belongs to, if any."""
        return self._run.batch

    @property
    def attempt(self) -> int:
        """The task attempt now running, from 1. Survives crashes."""
        return self._run.attempt

    @property
    def run(self) -> int:
        """Which run of the task this is: 1, until ``cairn rerun`` makes the next."""
        return self._run.run_number

    def run_key(self, *parts: KeyPart) -> str:
        """An operation key for an effect that belongs to this run of this task:
        the task's id, its run number, then ``op_key(*parts)``. Give it to
        ``ctx.once`` for an effect a rerun should make again (once in each
        run), such as posting the run's findings; a key built with ``op_key``
        names the effect for good, and a rerun finds it done and does not call
        it again (docs/reruns.md)."""
        return run_key(self._run.task_id, self._run.run_number, *parts)

    # -- steps -----------------------------------------------------------------
    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., Coroutine[Any, Any, T]],
        /,
        *args: Any,
        retry: Retry | None = None,
        limit: LimitRef | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def step(
        self,
        name: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        retry: Retry | None = None,
        limit: LimitRef | None = None,
        **kwargs: Any,
    ) -> T: ...

    def step(
        self,
        name: str,
        fn: Callable[..., Any] | None = None,
        /,
        *args: Any,
        retry: Retry | None = None,
        limit: LimitRef | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a checkpointed step called ``name``.

        On replay, a step that completed returns its recorded output and ``fn``
        is not called. ``retry`` overrides the step's retry policy (by default a
        step makes one attempt and the task's policy retries the task).
        ``limit`` names one of the app's shared limits (``Cairn(limits=...)``):
        each call of ``fn`` waits for, and holds, one of its permits;
        ``limit=("api", tenant)`` counts the call under key ``tenant`` of a
        keyed limit (``Concurrency(2, key=...)``), in place of the key the limit
        finds in the task's arguments.
        """
        named: object = name  # typed str, but a newcomer may pass the function here
        if fn is None or not isinstance(named, str) or not callable(fn):
            raise _misused("ctx.step", name, fn)
        if not (name.isascii() and "\x00" not in name and name.strip()):
            # Blank, a NUL or a lone surrogate: refused unless already recorded
            # here (the common ASCII name is checked inline, so the hot path
            # enters no other module).
            self._run.check_entry_name("step name", "step", name)
        if limit is not None:  # an unknown name fails here, replay or not
            self._run.limits.get(split_ref(limit)[0])
        retry = retry or self._default_step_retry
        # _is_async's fast answer, inline: a plain function (or a bound method,
        # which hands on its function's __code__) that is not a coroutine's.
        code = getattr(fn, "__code__", None)
        if _is_async(fn) if code is None else code.co_flags & inspect.CO_COROUTINE:
            machine = step_machine(self._run, "step", name, fn, args, kwargs, retry, limit)
            return adrive(machine, self._run.clock)
        return run_step(self._run, "step", name, fn, args, kwargs, retry, limit)

    # -- recorded inputs ---------------------------------------------------------
    @overload
    def record(
        self, name: str, fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any, **kwargs: Any
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def record(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T: ...

    def record(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Record ``fn()``'s value the first time; return the recorded one on replay.

        For any value that must be the same on replay: a time window, a fetched
        token, a choice. Not retried: an error propagates and nothing is kept.
        """
        self._run.check_entry_name("recorded input name", "input", name)
        if _is_async(fn):
            machine = step_machine(self._run, "input", name, fn, args, kwargs, NO_RETRY)
            return adrive(machine, self._run.clock)
        return run_step(self._run, "input", name, fn, args, kwargs, NO_RETRY)

    def now(self) -> datetime:
        """The current time (tz-aware UTC), recorded: a replay sees the same instant."""
        return self._input("now", self._run.clock.now)

    def uuid(self) -> _uuid.UUID:
        """A random UUID, recorded."""
        return self._input("uuid", _uuid.uuid4)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._input("random", _random.random)

    def _input(self, name: str, fn: Callable[[], T]) -> T:
        return run_step(self._run, "input", name, fn, (), {}, NO_RETRY)  # type: ignore[no-any-return]

    # -- side effects, at most once per key ------------------------------------------
    def before_send(self) -> None:
        """Call right before an operation's request leaves the machine (after
        building it, refreshing a token, resolving the host): raises
        ``LeaseLost``, and the request must not be sent, if this process may
        have lost its task since ``ctx.once`` called the function (paused past
        its lease). Costs a few microseconds while the lease is fresh; renews
        it (one round trip) when it is not. See docs/operations.md."""
        before_send(self._run)

    @overload
    def once(
        self,
        key: str,
        fn: Callable[..., Coroutine[Any, Any, T]],
        /,
        *args: Any,
        scope: str = "",
        reconcile: Reconcile | None = None,
        on_doubt: OnDoubt = "raise",
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def once(
        self,
        key: str,
        fn: Callable[..., T],
        /,
        *args: Any,
        scope: str = "",
        reconcile: Reconcile | None = None,
        on_doubt: OnDoubt = "raise",
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> T: ...

    def once(
        self,
        key: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        scope: str = "",
        reconcile: Reconcile | None = None,
        on_doubt: OnDoubt = "raise",
        retry: Retry | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn(key, *args, **kwargs)`` at most once per ``key``, store-wide.

        The key is claimed and committed before ``fn`` runs, and ``fn`` receives
        it so it can pass it on as the outside system's idempotency key. Any later
        call with the same key, from any task or process, returns the recorded
        result without calling ``fn``. If an attempt died between claim and
        record, the key is *in doubt*: ``reconcile(key)`` is asked (a result means
        it happened; None means call again), or ``on_doubt="retry"`` calls again
        with the same key, or by default ``InDoubtOperation`` stops the task.
        """
        if retry is None and reconcile is None and scope == "" and on_doubt == "raise":
            policy = _PLAIN_ONCE  # the defaults: nothing to check, nothing to build
        else:
            check_name("operation scope", scope, empty_ok=True)
            policy = OncePolicy(
                retry=retry or NO_RETRY, scope=scope, reconcile=reconcile, on_doubt=on_doubt
            )
        machine = once_machine(self._run, bounded_key(key), fn, args, kwargs, policy)
        if _is_async(fn) or (reconcile is not None and _is_async(reconcile)):
            return adrive(machine, self._run.clock)
        return drive(machine, self._run.clock)

    # -- fan-out ---------------------------------------------------------------------
    def map(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        /,
        *,
        name: str | None = None,
        concurrency: int = 4,
        key: Callable[[Any], Any] | None = None,
        retry: Retry | None = None,
        limit: str | None = None,
    ) -> Any:
        """Run ``fn(item)`` for each item as a checkpointed step, up to
        ``concurrency`` at once (threads; coroutines when ``fn`` is async, and
        then this returns an awaitable). Returns the results in item order.

        Each item is checkpointed on its own, as ``name[key]`` (``name``
        defaults to ``fn``'s name; ``key(item)`` to the item itself when it is a
        str or int, else its index). A resumed map runs only the items without a
        checkpoint, and ``concurrency`` may differ between runs. An item that
        fails (after its ``retry``) does not stop the others; the first failure
        is raised once they end, their checkpoints kept. ``fn`` runs as a plain
        step: it must not call ``ctx`` itself. ``limit`` names a shared limit
        (see ``Cairn(limits=...)``) each item's call holds a permit of.
        """
        if concurrency < 1:
            raise ValueError(f"ctx.map concurrency must be at least 1, not {concurrency}")
        label = name or getattr(fn, "__name__", None) or "map"
        self._run.check_entry_name("map name", "map", label)
        listed = list(items)
        names = _fanout.item_names(label, listed, key)
        first = _fanout.open_map(self._run, label, len(listed))
        plain = _outside_context(fn)
        policy = retry or self._default_step_retry
        plan = _fanout.MapPlan(self._run, plain, listed, names, first, policy, limit)
        if _is_async(fn):
            return _fanout.arun_items(plan, concurrency)
        return _fanout.run_items(plan, concurrency)

    def spawn(
        self, task: TaskDef[..., Any], /, *, key: str | None = None, **kwargs: Any
    ) -> ChildTask:
        """Start ``task(**kwargs)`` as a child task and return its handle, once:
        a resumed parent gets the same child back. The child's id is this task's
        id + ``/`` + ``key`` (default: the task name and the spawn's position).
        Workers (or the join) run it; ``ctx.join`` waits for it."""
        return spawn(self._need_engine("spawn"), self._run, task, key, kwargs)

    def join(self, *children: ChildTask | Iterable[ChildTask], poll: float = 30.0) -> Any:
        """Wait for child tasks and return their results in order (an awaitable in
        an async task). Recorded: a resumed parent does not look again.

        A child nobody has started runs right here; one running elsewhere is
        polled for; if every unfinished child waits for a signal, this task
        suspends too and looks again every ``poll`` seconds. A failed or
        cancelled child raises ``ChildFailed``."""
        handles: list[ChildTask] = []
        for child in children:
            handles.extend([child] if isinstance(child, ChildTask) else child)
        engine = self._need_engine("join")
        if in_event_loop():
            return adrive(join_machine(engine, self._run, handles, poll, True), self._run.clock)
        return drive(join_machine(engine, self._run, handles, poll, False), self._run.clock)

    # -- waiting for people and events ---------------------------------------------------
    def wait_for(self, name: str, /, *, timeout: float | timedelta | None = None) -> Signal:
        """Wait durably for signal ``name`` (``cairn signal TASK NAME JSON`` or
        ``app.signal``) and return it; ``timeout`` (seconds or a timedelta)
        returns a ``Signal`` with ``timed_out=True`` instead.

        If the signal is not there yet, the task is suspended: it stops here,
        holding no process, and is taken up again (replaying to this point) when
        the signal arrives or the timeout passes. Use one name per wait."""
        return wait_for(self._run, check_name("signal name", name), seconds_of(timeout))

    def _need_engine(self, what: str) -> EngineConfig:
        if self._run.engine is None:
            raise RuntimeError(f"ctx.{what} needs a context made by a Cairn app")
        return self._run.engine

    # -- rolling out a change to tasks in flight -------------------------------------
    def patched(self, name: str) -> bool:
        """Whether this task runs the new code of the fix ``name`` here: True for
        a task that reaches this point on code that has the patch (the answer is
        recorded, so it holds across crashes), False for one whose recorded
        history had already gone past this point. Branch on it::

            if ctx.patched("stricter-parser"):
                verdict = ctx.step("parse-v2", parse_v2, raw)
            else:
                verdict = ctx.step("parse", parse, raw)

        (docs/versions.md)."""
        return patched(self._run, name)

    # -- durable sleep ---------------------------------------------------------------
    def sleep(self, seconds: float) -> None:
        """Sleep durably: the wake-up time is recorded, so a resumed task sleeps
        only what is left."""
        drive(sleep_machine(self._run, seconds), self._run.clock)

    async def asleep(self, seconds: float) -> None:
        """``sleep`` for async tasks."""
        await adrive(sleep_machine(self._run, seconds), self._run.clock)

    # -- agent context (cairn.agent) -----------------------------------------------------
    def conversation(self, name: str = "main", **options: Any) -> Conversation:
        """Open (or create) the durable conversation ``name`` of this task.

        Options: ``system``, ``threshold`` (8000 tokens), ``keep_tail`` (2000),
        ``summarizer``, ``counter`` (or ``model``: the counter for that model's
        tokens, exact for OpenAI models with the ``tokens`` extra, see
        ``cairn.agent.tokens``), ``prices``, ``client``, ``start_from`` (a
        handoff document), ``summary_tokens``, ``clear_tool_results`` (a
        ``ToolResultClearing``) and ``max_context`` (the hard bound on the
        active context, twice ``threshold``: ``cairn.agent.fallback``); see
        ``cairn.agent.conversation``.
        """
        from cairn.agent.conversation import open_conversation

        return open_conversation(self, name, **options)

    def llm(self, conv: Conversation, /, *, model: str, **options: Any) -> Any:
        """Send ``conv``'s active context to ``model`` as a recorded call (compacting
        first if it is due), append the reply and return it; on replay the recorded
        reply comes back and nothing is sent. An awaitable with an async client.

        Options: ``tools``, ``client``, ``prices``, ``retry``, ``stream`` and
        ``on_chunk`` (the reply's text handed over as it arrives; on replay, the
        recorded text as one chunk), ``limit`` (the ``TokenRate`` it counts
        against, by name; default: one declared for its provider and model), and
        any request parameter (``temperature``, ``max_tokens``, ...); see
        ``cairn.agent.llm`` and docs/budgets.md.
        """
        from cairn.agent.llm import llm

        return llm(self, conv, model=model, **options)

    def llm_call(
        self, messages: Sequence[Mapping[str, Any]], /, *, model: str, **options: Any
    ) -> Any:
        """One recorded model call on ``messages``, outside any conversation (the
        options of ``llm``, ``stream`` and ``on_chunk`` included, and ``name``)."""
        from cairn.agent.llm import llm_call

        return llm_call(self, messages, model=model, **options)
