"""A step's fingerprint: what changes it and what does not, and that it is made
once per function (``cairn.engine.steps.fingerprint_of``)."""

from __future__ import annotations

import functools
import importlib.util
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cairn.agent.llm import model_fingerprint
from cairn.engine import steps
from cairn.engine.changes import what_changed
from cairn.engine.steps import fingerprint_of


def compiled(source: str, name: str = "analyze") -> Callable[..., Any]:
    """The function ``name`` defined by ``source``, with no file behind it."""
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(source), namespace)  # noqa: S102 - test input, written here
    return namespace[name]  # type: ignore[no-any-return]


def first() -> str:
    return "a"


def second() -> str:
    return "b"


def from_file(folder: Path, module: str, source: str) -> Callable[..., Any]:
    """Function ``analyze`` of ``source``, imported from a file of its own."""
    path = folder / f"{module}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded.analyze  # type: ignore[no-any-return]


def test_a_changed_body_changes_the_fingerprint_and_layout_does_not(tmp_path: Path) -> None:
    """Source tokens: the same function with a comment, other spacing and other
    line numbers keeps its fingerprint; a changed value changes it."""
    base = from_file(tmp_path, "one", 'def analyze(page):\n    return page + "!"\n')
    laid_out = from_file(
        tmp_path,
        "two",
        '\n\n# moved down\ndef analyze( page ):\n\n    # why\n    return page+"!"  # so\n',
    )
    changed = from_file(tmp_path, "three", 'def analyze(page):\n    return page + "?"\n')
    assert fingerprint_of(base).startswith("code:")
    assert fingerprint_of(laid_out) == fingerprint_of(base)
    assert fingerprint_of(changed) != fingerprint_of(base)
    assert fingerprint_of(first) != fingerprint_of(second)


def test_code_without_a_file_is_fingerprinted_by_its_bytecode() -> None:
    """Code made at run time has no source to read: its bytecode is hashed,
    which spacing does not change and a changed value does."""
    one = compiled("def here():\n    return 41 + 1\n", "here")
    spaced = compiled("def here():\n  return 41+1\n", "here")
    other = compiled("def here():\n    return 43\n", "here")
    assert fingerprint_of(one) == fingerprint_of(spaced)
    assert fingerprint_of(one) != fingerprint_of(other)


def test_the_fingerprint_is_made_once_per_code_object() -> None:
    """A second call for the same function (or a closure of the same code) is a
    dictionary lookup: the cache holds it by code object."""

    def make(value: int) -> Callable[[], int]:
        def inner() -> int:
            return value

        return inner

    one, two = make(1), make(2)
    printed = fingerprint_of(one)
    assert steps._FINGERPRINTS[one.__code__] == printed
    assert fingerprint_of(two) == printed  # the same code: the captured value is data


def test_partials_wrapped_functions_and_callable_objects_are_seen_through() -> None:
    """A partial is its function; a decorated function (functools.wraps) is the
    function it wraps; a callable object is its class's __call__."""

    def decorate(fn: Callable[[], str]) -> Callable[[], str]:
        @functools.wraps(fn)
        def wrapper() -> str:
            return fn()

        return wrapper

    class Parser:
        def __call__(self) -> str:
            return "parsed"

    assert fingerprint_of(functools.partial(first)) == fingerprint_of(first)
    assert fingerprint_of(decorate(first)) == fingerprint_of(first)
    assert fingerprint_of(decorate(first)) != fingerprint_of(decorate(second))
    assert fingerprint_of(Parser()) == fingerprint_of(Parser.__call__)
    assert fingerprint_of(len).startswith("code:")


def test_a_model_calls_fingerprint_names_what_changed() -> None:
    """The model, the system text and the tools each have a part of their own,
    and the difference is said in words."""
    old = model_fingerprint("gpt-4o", ["Be brief."], [{"name": "read"}])
    assert old.startswith("model:gpt-4o system:")
    assert model_fingerprint("gpt-4o", ["Be brief."], [{"name": "read"}]) == old
    prompt = model_fingerprint("gpt-4o", ["Be thorough."], [{"name": "read"}])
    assert what_changed(old, prompt) == "the system text changed"
    both = model_fingerprint("gpt-4.1", ["Be brief."], [])
    assert what_changed(old, both) == "the model changed, the tools changed"
    assert what_changed("code:1", "code:2") == "its code changed"


def test_steps_in_turn_through_one_decorator_keep_their_own_fingerprints(
    tmp_path: Path,
) -> None:
    """A step remembers the last code it fingerprinted, but a decorator's
    wrapper shares its code with every function it wraps: steps that alternate
    between two wrapped functions (and a plain one) each record the wrapped
    function's own fingerprint, never the one looked up just before."""
    from cairn import Cairn, Context

    def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any) -> Any:
            return fn(*args)

        return wrapper

    def double(x: int) -> int:
        return 2 * x

    def triple(x: int) -> int:
        return 3 * x

    wrapped_double, wrapped_triple = logged(double), logged(triple)
    app = Cairn(f"sqlite:///{tmp_path / 'c.db'}")

    @app.task
    def alternate(ctx: Context) -> int:
        total = 0
        for i in range(3):
            total += ctx.step("d", wrapped_double, i)
            total += ctx.step("t", wrapped_triple, i)
            total += ctx.step("p", double, i)
        return total

    with app:
        app.run(alternate, task_id="alt")
        history = app.store.load_history("alt")
    expected = {
        "d": fingerprint_of(double),
        "t": fingerprint_of(triple),
        "p": fingerprint_of(double),
    }
    assert expected["d"] != expected["t"]
    assert len(history) == 9
    for record in history.values():
        assert record.fingerprint == expected[record.name], record
