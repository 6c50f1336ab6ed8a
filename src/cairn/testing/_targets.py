"""Finding a user's objects by a text path: ``package.module:name`` or ``file.py:name``.

Crash tests and chaos runs name the code to run as text, because it runs in
other processes. A module path is imported; a path ending in ``.py`` is loaded
from that file. The part after the colon may be dotted (``module:obj.attr``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from cairn.app import Cairn
from cairn.errors import ConfigurationError, TaskNotRegistered
from cairn.task import TaskDef


def split(target: str) -> tuple[str, str]:
    """``"module:attr"`` into its two halves, or a ``ConfigurationError``."""
    module, colon, attr = target.rpartition(":")
    if not colon or not module or not attr:
        raise ConfigurationError(
            f"{target!r} does not name an object: write package.module:name or path/file.py:name"
        )
    return module, attr


def absolute(target: str) -> str:
    """``target`` with a file path made absolute, so it means the same in any directory."""
    module, attr = split(target)
    if module.endswith(".py"):
        return f"{Path(module).resolve()}:{attr}"
    return target


def load_module(module: str) -> ModuleType:
    if not module.endswith(".py"):
        return importlib.import_module(module)
    path = Path(module)
    if not path.is_file():
        where = "" if path.is_absolute() else f" (a relative path is read from {Path.cwd()})"
        raise ConfigurationError(
            f"no Python file at {path}{where}: give the file's full path, "
            "for example Path(__file__).parent / 'workflow.py' from a test file"
        )
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses and pickle look a module up by name
    spec.loader.exec_module(loaded)
    return loaded


def load(target: str) -> Any:
    """The object ``target`` names."""
    module, attr = split(target)
    value: Any = load_module(module)
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigurationError(f"{target!r}: {module} has no attribute {attr!r}") from None
    return value


def load_task(target: str, app: str | None = None) -> tuple[Cairn, TaskDef[..., Any]]:
    """The task ``target`` names and the app it is registered on.

    Without ``app``, the app is the ``Cairn`` instance in the task's module that
    has the task registered.
    """
    task = load(target)
    if not isinstance(task, TaskDef):
        raise ConfigurationError(
            f"{target!r} is not a cairn task; name the function decorated with @app.task"
        )
    if app is not None:
        found = load(app)
        if not isinstance(found, Cairn):
            raise ConfigurationError(f"{app!r} is not a Cairn app")
        return found, task
    module = load_module(split(target)[0])
    for value in vars(module).values():
        if isinstance(value, Cairn) and _has(value, task):
            return value, task
    raise ConfigurationError(
        f"no Cairn app in {module.__name__} has task {task.name!r} registered; pass the "
        "app's path too (app='module:app')"
    )


def _has(app: Cairn, task: TaskDef[..., Any]) -> bool:
    try:
        return app.registered(task.name) is task
    except TaskNotRegistered:
        return False
