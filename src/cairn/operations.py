"""Declaring a side effect once, with its key, and calling it like a function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from cairn.context import current_context
from cairn.engine.once import OnDoubt, Reconcile
from cairn.errors import CairnError
from cairn.retry import Retry

P = ParamSpec("P")
R = TypeVar("R")


def operation(
    *,
    key: Callable[P, str],
    scope: str = "",
    reconcile: Reconcile | None = None,
    on_doubt: OnDoubt = "raise",
    retry: Retry | None = None,
) -> Callable[[Callable[Concatenate[str, P], R]], Callable[P, R]]:
    """Declare a side effect guarded by a key built from its arguments.

    ::

        @cairn.operation(key=lambda app_id, day: cairn.op_key("admob", app_id, "apply", day))
        def apply_settings(key: str, app_id: str, day: date) -> dict: ...

        # inside a task:
        apply_settings(app_id, day)   # runs at most once per (app, day)

    The function receives the key first. Calling it outside a task is an error:
    there would be nothing to guard it.
    """

    def decorate(fn: Callable[Concatenate[str, P], R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            ctx = current_context()
            if ctx is None:
                raise CairnError(
                    f"operation {fn.__name__!r} was called outside a cairn task; call it "
                    "from inside a task function so it can run at most once"
                )
            result: R = ctx.once(
                key(*args, **kwargs),
                fn,
                *args,
                scope=scope,
                reconcile=reconcile,
                on_doubt=on_doubt,
                retry=retry,
                **kwargs,
            )
            return result

        # Show callers the signature they use: without the leading key.
        signature = inspect.signature(fn)
        without_key = signature.replace(parameters=list(signature.parameters.values())[1:])
        guarded.__signature__ = without_key  # type: ignore[attr-defined]
        return guarded

    return decorate
