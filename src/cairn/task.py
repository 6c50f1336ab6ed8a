"""Declaring tasks and steps: the decorators, and how a task's id is derived."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from cairn.budgets import Budget
from cairn.codec import Codec, JsonCodec
from cairn.context import Context, current_context
from cairn.engine.config import CHANGE_POLICIES, ChangePolicy
from cairn.engine.steps import fingerprint_of
from cairn.errors import CodecError, ConfigurationError, TaskArgumentsError
from cairn.names import check_name
from cairn.redaction import holds_secret
from cairn.retry import Retry

P = ParamSpec("P")
R = TypeVar("R")

_KEY_CODEC = JsonCodec()
_READABLE_KEY_LIMIT = 80
_LOOKS_LIKE_INT = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class TaskDef(Generic[P, R]):
    """A registered task function. Still callable as the plain function."""

    name: str
    fn: Callable[Concatenate[Context, P], R]
    retry: Retry | None
    # Seconds from the task's first start after which it stops at its next step
    # boundary and fails (TimeLimitExceeded); None for no limit.
    max_duration: float | None = None
    # What a replay does at an entry whose code changed (docs/versions.md);
    # None: the app's policy.
    on_change: ChangePolicy | None = None
    # Whether on_change='rerun' may send ctx.llm_call again; None: the app's.
    rerun_models: bool | None = None
    # What the task's model calls may spend, its children's and every attempt's
    # included (cairn.budgets); None: no budget of its own.
    budget: Budget | None = None

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, ctx: Context, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(ctx, *args, **kwargs)

    def check_arguments(self, kwargs: Mapping[str, Any]) -> None:
        """Raise ``TaskArgumentsError`` unless ``kwargs`` fit the function."""
        signature = inspect.signature(self.fn)
        try:
            signature.bind(None, **kwargs)
        except TypeError as exc:
            first = next(iter(signature.parameters), None)
            if first is not None and first in kwargs:
                raise TaskArgumentsError(
                    f"task {self.name!r} was given {first}= but its first parameter, "
                    f"{first!r}, is where the context goes. Its signature is "
                    f"{self.name}{signature}; write def {self.name}(ctx: Context, "
                    f"{first}, ...). Nothing was recorded."
                ) from exc
            raise TaskArgumentsError(
                f"task {self.name!r} cannot take the arguments {dict(kwargs)!r}: {exc}. "
                f"Its signature is {self.name}{signature}; pass the arguments after the "
                "context by name. Nothing was recorded."
            ) from exc

    def encode_arguments(self, codec: Codec, kwargs: Mapping[str, Any]) -> str:
        """The recorded form of ``kwargs``, checked against the function first.
        Arguments holding a known secret (``cairn.redaction``) are refused: they
        would be stored, and a redacted copy would run the task wrongly."""
        self.check_arguments(kwargs)
        try:
            # Sorted, so the same arguments given in another order are the same task.
            text = codec.encode({name: kwargs[name] for name in sorted(kwargs)})
        except CodecError as exc:
            raise TaskArgumentsError(
                f"task {self.name!r}: its arguments cannot be recorded: {exc}"
            ) from exc
        if holds_secret(text):
            raise self._secret_argument(codec, kwargs)
        return text

    def _secret_argument(self, codec: Codec, kwargs: Mapping[str, Any]) -> TaskArgumentsError:
        named = [name for name in sorted(kwargs) if holds_secret(codec.encode(kwargs[name]))]
        which = ", ".join(repr(name) for name in named) or "one of its arguments"
        return TaskArgumentsError(
            f"task {self.name!r}: argument {which} holds a secret cairn keeps out of the "
            "store (a model client's key, a credential environment variable's value, or "
            "a secret registered with Cairn(secrets=...)). Arguments are stored: pass the "
            "secret's name instead, and read its value inside the task. Nothing was recorded."
        )


def checked_policy(value: str | None, where: str) -> ChangePolicy | None:
    """``value`` as an ``on_change`` policy, or a clear error."""
    if value is None:
        return None
    for policy in CHANGE_POLICIES:
        if value == policy:
            return policy
    raise ConfigurationError(
        f"{where}: on_change={value!r} is not a policy; use one of "
        f"{', '.join(repr(p) for p in CHANGE_POLICIES)} (docs/versions.md)"
    )


def derived_version(tasks: Mapping[str, TaskDef[..., Any]]) -> str:
    """An app version made from its task functions' code: ``code-`` and a hash
    of each registered name with its function's fingerprint. It covers the task
    functions themselves, not the functions they call; give ``version=`` to
    name versions yourself."""
    parts = sorted(f"{name}={fingerprint_of(task.fn)}" for name, task in tasks.items())
    return "code-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


_CONTEXT_ANNOTATIONS = frozenset({"Context", "Any", "object"})


def check_task_function(name: str, fn: Callable[..., Any]) -> None:
    """Refuse, when it is registered, a task function that cannot take the context
    as its first argument: one with no positional parameter, or whose first
    parameter is annotated as something other than ``Context``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check before it runs
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    first = positional[0] if positional else None
    if first is not None and (first.kind is first.VAR_POSITIONAL or _names_context(first)):
        return
    # Postponed annotations print quoted ('str'); the user wrote them bare.
    shown = str(signature).replace("'", "")
    found = "has no positional parameter"
    if first is not None:
        found = f"takes {str(first).replace(chr(39), '')} first"
    raise TaskArgumentsError(
        f"task {name!r}{shown} {found}; a task function takes the context first, "
        f"then its arguments: def {getattr(fn, '__name__', name)}(ctx: Context, ...)."
    )


def _names_context(param: inspect.Parameter) -> bool:
    """True unless ``param`` is annotated as something a context is not."""
    annotation = param.annotation
    if annotation is param.empty:
        return True
    if isinstance(annotation, str):  # from __future__ import annotations
        return annotation.strip("'\" ").rsplit(".", 1)[-1] in _CONTEXT_ANNOTATIONS
    if isinstance(annotation, type):
        return issubclass(Context, annotation)
    return annotation is Any


def item_key(kwargs: Mapping[str, Any]) -> str:
    """A stable key for a task's arguments: readable when short, hashed otherwise.

    ``{"app_id": "a1"}`` gives ``app_id=a1``; long or nested arguments give
    ``sha256:`` and 16 hex digits of their canonical encoding.
    """
    simple = all(_readable(v) for v in kwargs.values())
    readable = ",".join(f"{k}={kwargs[k]}" for k in sorted(kwargs))
    if simple and len(readable) <= _READABLE_KEY_LIMIT:
        return readable
    canonical = _KEY_CODEC.encode({k: kwargs[k] for k in sorted(kwargs)})
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _readable(value: Any) -> bool:
    """True if ``value`` can stand in a key as text without being mistaken for
    another value: ``1`` and ``"1"`` must not give the same key."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if not isinstance(value, str) or not value or "/" in value or "," in value:
        return False
    return not _LOOKS_LIKE_INT.match(value)


@overload
def step(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def step(
    *, name: str | None = None, retry: Retry | None = None, limit: str | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def step(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    retry: Retry | None = None,
    limit: str | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare a step once; calling it inside a task checkpoints it.

    Outside a task, the function runs plainly (handy in unit tests). ``limit``
    names a shared limit of the app each call holds a permit of.
    """

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        step_name = check_name("step name", name or func.__name__, max_bytes=None)
        if inspect.iscoroutinefunction(func):
            return _async_step(func, step_name, retry, limit)  # type: ignore[return-value]

        @functools.wraps(func)
        def run_step(*args: P.args, **kwargs: P.kwargs) -> R:
            ctx = current_context()
            if ctx is None:
                return func(*args, **kwargs)
            result: R = ctx.step(step_name, func, *args, retry=retry, limit=limit, **kwargs)
            return result

        return run_step

    return decorate if fn is None else decorate(fn)


def _async_step(
    func: Callable[P, Coroutine[Any, Any, R]],
    step_name: str,
    retry: Retry | None,
    limit: str | None,
) -> Callable[P, Coroutine[Any, Any, R]]:
    @functools.wraps(func)
    async def run_step(*args: P.args, **kwargs: P.kwargs) -> R:
        ctx = current_context()
        if ctx is None:
            return await func(*args, **kwargs)
        result: R = await ctx.step(step_name, func, *args, retry=retry, limit=limit, **kwargs)
        return result

    return run_step
