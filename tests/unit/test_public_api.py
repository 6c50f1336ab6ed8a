"""The public surface: ``cairn.__all__`` is explicit, sorted and complete."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

import cairn
import cairn.admin
import cairn.integrations.langgraph
import cairn.testing


@pytest.mark.parametrize(
    "module", [cairn, cairn.testing, cairn.integrations.langgraph], ids=lambda m: m.__name__
)
def test_all_is_sorted_and_unique(module: ModuleType) -> None:
    """__all__ is in sorted order with no name listed twice."""
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "module",
    [cairn, cairn.admin, cairn.testing, cairn.integrations.langgraph],
    ids=lambda m: m.__name__,
)
def test_every_listed_name_is_importable(module: ModuleType) -> None:
    """Every name in __all__ can be imported from the package."""
    fresh = importlib.import_module(module.__name__)
    missing = [name for name in module.__all__ if not hasattr(fresh, name)]
    assert missing == []


def _defined_in_cairn(value: object) -> bool:
    return (inspect.isclass(value) or inspect.isfunction(value)) and (
        getattr(value, "__module__", "") or ""
    ).split(".")[0] == "cairn"


def test_every_public_class_and_function_is_listed() -> None:
    """Each public class or function of cairn's that ``cairn`` exposes is in __all__,
    so nothing is public by accident (httpx's test_exported_members)."""
    public = {
        name
        for name, value in vars(cairn).items()
        if not name.startswith("_") and _defined_in_cairn(value)
    }
    assert sorted(public - set(cairn.__all__)) == []


def test_listed_names_are_cairn_classes_and_functions() -> None:
    """__all__ holds cairn's own classes and functions, not re-exported modules."""
    strays = [name for name in cairn.__all__ if not _defined_in_cairn(getattr(cairn, name))]
    assert strays == []


def test_star_import_gives_exactly_all() -> None:
    """``from cairn import *`` brings in exactly the names in __all__."""
    namespace: dict[str, object] = {}
    exec("from cairn import *", namespace)  # noqa: S102 - a fixed import line
    namespace.pop("__builtins__", None)
    assert sorted(namespace) == sorted(cairn.__all__)


def test_version_is_exposed() -> None:
    """cairn.__version__ is a dotted version string."""
    assert cairn.__version__.count(".") >= 1
