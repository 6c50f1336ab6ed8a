"""A newcomer's first mistakes are refused where they are made, with a sentence
that says what to write instead: a task without ``ctx``, items that
are not mappings, ``ctx.step`` without a name, a malformed store URL, and any
error left over in the CLI as one red line with exit code 2.
"""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cairn import Cairn, ConfigurationError, Context, Retry, TaskArgumentsError, TaskFailed
from cairn.cli import app as cli_app
from cairn.cli._errors import CairnGroup
from cairn.clock import FakeClock
from cairn.store import admin
from tests.conftest import postgres_admin_url


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Cairn]:
    """An app on a new SQLite store whose tasks make three attempts at most."""
    with Cairn(
        f"sqlite:///{tmp_path / 'cairn.db'}",
        clock=FakeClock(),
        task_retry=Retry(attempts=3, initial_delay=0),
    ) as opened:
        yield opened


def _one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


# -- a task without ctx ----------------------------------------------------------------


def test_a_task_whose_first_parameter_is_typed_as_an_argument_is_refused(app: Cairn) -> None:
    """``def review(app_id: str)`` is refused by @app.task, saying the context goes
    first, instead of failing later with "multiple values for argument"."""

    def review(app_id: str) -> str:
        return app_id

    with pytest.raises(TaskArgumentsError) as refused:
        app.task(review)  # type: ignore[arg-type]
    message = str(refused.value)
    assert "takes app_id: str first" in message
    assert "def review(ctx: Context, ...)" in message
    assert app.task_names() == []


def test_a_task_with_no_positional_parameter_is_refused(app: Cairn) -> None:
    """A task function with nowhere to put the context is refused when registered."""

    def ping(*, n: int) -> int:
        return n

    with pytest.raises(TaskArgumentsError, match="has no positional parameter"):
        app.task(name="ping")(ping)  # type: ignore[arg-type]


def test_a_context_annotated_by_name_or_left_bare_is_accepted(app: Cairn) -> None:
    """A first parameter annotated ``"Context"`` (postponed annotations) or not at
    all may hold the context, whatever it is called."""

    def typed(ctx: Context, n: int) -> int:
        return n

    def bare(c, n):  # no annotations: the point of the test
        return n

    def postponed(ctx: cairn.Context, n: int) -> int:  # type: ignore[name-defined]  # noqa: F821
        return n

    assert isinstance(inspect.signature(postponed).parameters["ctx"].annotation, str)
    for fn in (typed, bare, postponed):
        app.task(fn)
    assert app.run(app.registered("bare"), n=3) == 3


def test_an_argument_given_for_the_context_parameter_says_so(app: Cairn) -> None:
    """An unannotated task without ctx (``def review(app_id)``) given ``app_id=``
    is told that its first parameter is where the context goes; nothing is written."""

    def review(app_id, dry_run=False):  # no annotations: the point of the test
        return app_id

    task = app.task(review)
    with pytest.raises(TaskArgumentsError) as refused:
        app.run_batch("apps", task, [{"app_id": "a1"}], progress=False)
    assert "its first parameter, 'app_id', is where the context goes" in str(refused.value)
    assert "def review(ctx: Context, app_id, ...)" in str(refused.value)
    assert admin(app.store).batch_summaries() == []


# -- items that are not mappings -----------------------------------------------------------


def test_items_that_are_not_mappings_are_refused_with_the_index(app: Cairn) -> None:
    """``run_batch(..., ["a1", "a2"])`` names item 0, its value and type, and shows the
    shape to write; no task and no batch is written."""

    @app.task
    def review(ctx: Context, app_id: str) -> str:
        return app_id

    with pytest.raises(TaskArgumentsError) as refused:
        app.run_batch("apps", review, ["a1", "a2"], progress=False)  # type: ignore[list-item]
    message = str(refused.value)
    assert "item 0 of the items for task 'review' is 'a1' (str)" in message
    assert '[{"app_id": "a1"}, {"app_id": "a2"}]' in message
    assert admin(app.store).batch_summaries() == []


def test_a_bad_item_later_in_a_stream_is_named_by_its_index(app: Cairn) -> None:
    """In a generator of items, the first one that is not a mapping is named by its
    position counted from 0."""

    @app.task
    def review(ctx: Context, app_id: str) -> str:
        return app_id

    def items() -> Iterator[object]:
        yield {"app_id": "a1"}
        yield {"app_id": "a2"}
        yield ("app_id", "a3")

    with pytest.raises(TaskArgumentsError, match=r"item 2 .* \('app_id', 'a3'\) \(tuple\)"):
        app.enqueue("apps", review, items())  # type: ignore[arg-type]


# -- ctx.step misused ------------------------------------------------------------------------


def _fetch() -> int:
    return 1


def test_ctx_step_without_a_name_fails_at_once_naming_the_call_site(app: Cairn) -> None:
    """``ctx.step(fetch)`` fails the task on its first attempt (not three) with an
    error naming this file and line and showing the call to write."""
    lines: list[int] = []

    @app.task
    def review(ctx: Context) -> int:
        lines.append(inspect.currentframe().f_lineno + 1)  # type: ignore[union-attr]
        ctx.step(_fetch)  # type: ignore[call-overload]
        raise AssertionError("unreachable")

    with pytest.raises(TaskFailed) as failed:
        app.run(review)
    message = str(failed.value)
    assert "after 1 attempt(s): cairn.errors.ConfigurationError" in message
    assert f"ctx.step(...) at {__file__}:{lines[0]}: " in message
    assert "its first argument is <function _fetch" in message
    assert "not the step's name" in message
    assert 'ctx.step("fetch", fetch, *args)' in message
    assert len(lines) == 1


def test_ctx_step_with_something_not_callable_fails_at_once(app: Cairn) -> None:
    """``ctx.step("fetch", 42)`` fails at once, saying the second argument is not a
    function to call."""

    @app.task
    def review(ctx: Context) -> int:
        return ctx.step("fetch", 42)  # type: ignore[call-overload, no-any-return]

    with pytest.raises(TaskFailed, match="its second argument is 42, not a function to call"):
        app.run(review)


# -- malformed store URLs --------------------------------------------------------------------


def test_cairn_refuses_a_url_without_slashes_when_constructed() -> None:
    """``Cairn("sqlite:/x.db")`` raises at once, before any task is registered, and
    names the forms cairn accepts."""
    with pytest.raises(ConfigurationError, match=r"starts with sqlite: but has no //"):
        Cairn("sqlite:/x.db")
    app = Cairn("sqlite:///ok.db")
    with pytest.raises(ConfigurationError, match=r"sqlite:////absolute/path.db"):
        app.use_store("postgres:db")


def test_use_store_after_a_run_names_the_line_that_opened_the_store(app: Cairn) -> None:
    """use_store() once the store is open is refused, naming the file, line and
    function whose call opened it (here: this test's app.run), and saying to
    call use_store() before that line; the app keeps its store."""

    @app.task
    def hello(ctx: Context) -> str:
        return ctx.step("greet", lambda: "hello")

    opened_line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    app.run(hello)
    with pytest.raises(ConfigurationError) as refused:
        app.use_store("sqlite:///elsewhere.db")
    message = str(refused.value)
    here = Path(__file__).resolve()
    shown = here.relative_to(Path.cwd()) if here.is_relative_to(Path.cwd()) else here
    assert message == (
        f"the app's store is already open: {shown}:{opened_line}, in "
        "test_use_store_after_a_run_names_the_line_that_opened_the_store() opened it. "
        "Call use_store() before that line."
    )
    assert app.run(hello) == "hello"


@pytest.mark.parametrize(
    "url", ["sqlite:/x.db", "sqlite:x.db", "postgres:/db", "   ", "sqlite://x.db", "mysql://h/db"]
)
def test_a_malformed_store_url_is_refused_and_creates_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Cairn("sqlite:/x.db")`` and its cousins are refused with the accepted forms
    (by ``Cairn()`` itself where the URL alone shows it), and no directory named
    ``sqlite:`` appears."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as refused:
        Cairn(url).store  # noqa: B018 - the URL is refused before any file is made
    assert "sqlite:///relative/path.db, sqlite:////absolute/path.db" in str(refused.value)
    assert "postgresql://user@host:5432/dbname" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_malformed_store_url_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cairn tasks --store sqlite:/x.db`` prints one line naming the accepted forms,
    exits 2 and creates nothing."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli_app, ["tasks", "--store", "sqlite:/x.db"])
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert "starts with sqlite: but has no //" in line
    assert list(tmp_path.iterdir()) == []


def test_a_typo_in_a_postgres_url_parameter_is_one_line_from_the_cli() -> None:
    """A mistyped libpq parameter (``sslmod``) is one red line naming it, exit code 2;
    the library raises ConfigurationError for it before connecting."""
    url = f"{postgres_admin_url()}?sslmod=disable"
    pytest.importorskip("psycopg")
    result = CliRunner().invoke(cli_app, ["tasks", "--store", url])
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert 'invalid URI query parameter: "sslmod"' in line
    assert "cairn's own parameters are schema, pool_size, reconnect_timeout" in line
    with pytest.raises(ConfigurationError, match="pool_size='ten' is not a number"):
        Cairn(f"{postgres_admin_url()}?pool_size=ten").store  # noqa: B018


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "postgresql://u:secret@127.0.0.1:notaport/db",
            "has port 'notaport', which is not a number",
        ),
        ("postgresql://u@127.0.0.1:99999/db", "has port '99999', which is not a number"),
        ("postgresql://u@127.0.0.1/db?schema=bad-name", "names schema 'bad-name', which is not"),
    ],
)
def test_what_a_postgres_url_alone_shows_is_refused_before_connecting(url: str, said: str) -> None:
    """A port that is no number or a schema that is no identifier is refused by
    ``Cairn()`` itself with the accepted forms (no password shown), and from the
    CLI as one line with exit code 2, no server asked."""
    with pytest.raises(ConfigurationError) as refused:
        Cairn(url)
    message = str(refused.value)
    assert said in message
    assert "postgresql://user@host:5432/dbname" in message
    assert "secret" not in message
    result = CliRunner().invoke(cli_app, ["tasks", "--store", url])
    assert result.exit_code == 2
    line = _one_line(result.stderr)
    assert said in line
    assert "secret" not in line


def test_a_multi_host_postgres_url_is_left_to_libpq() -> None:
    """libpq's ``host1:5432,host2:5433`` form is not taken for a bad port."""
    Cairn("postgresql://u@127.0.0.1:5432,127.0.0.2:5433/db")


# -- the CLI's last line of defence ----------------------------------------------------------


def test_a_driver_error_a_command_let_through_is_one_red_line() -> None:
    """Any sqlite3 error escaping a command under cairn's group becomes one line
    naming the driver's error, exit code 2, and no traceback."""
    group = typer.Typer(cls=CairnGroup)

    @group.command("boom")
    def boom() -> None:
        raise sqlite3.OperationalError("disk I/O error\nsecond line")

    @group.command("other")
    def other() -> None:
        raise ConfigurationError("a cairn error\nover two lines")

    result = CliRunner().invoke(group, ["boom"])
    assert result.exit_code == 2
    assert _one_line(result.stderr) == (
        "error: the store's driver failed (sqlite3.OperationalError): disk I/O error second line"
    )
    result = CliRunner().invoke(group, ["other"])
    assert (result.exit_code, _one_line(result.stderr)) == (
        2,
        "error: a cairn error over two lines",
    )
