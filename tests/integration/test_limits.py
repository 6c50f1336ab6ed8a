"""Shared limits and RetryAfter deferral, in one process: bad limits are refused
(the tests on every backend are in ``store/test_limits.py``).

Limits are checked where they matter: on the request log of a real HTTP server
on 127.0.0.1 (``ApiServer``), by the server's own clock. The tests that need
threads to really contend use the real clock with short windows; the deferral
tests use the fake clock, whose sleeps only move its own time.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from cairn import (
    Cairn,
    Concurrency,
    ConfigurationError,
    Context,
    Rate,
    TaskFailed,
)
from tests.crashes import url as url  # a fixture: pytest finds it by this name
from tests.integration.store.test_limits import (
    api as api,  # a fixture: pytest finds it by this name
)


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Rate(0), "count"),
        (lambda: Rate(-3, per=1), "count"),
        (lambda: Rate(True), "count"),
        (lambda: Rate(2.5), "count"),  # type: ignore[arg-type]
        (lambda: Rate(1, per=0), "per"),
        (lambda: Rate(1, per=-1), "per"),
        (lambda: Rate(1, per=float("inf")), "per"),
        (lambda: Rate(1, per=timedelta(0)), "per"),
        (lambda: Rate(1, per="60"), "per"),  # type: ignore[arg-type]
        (lambda: Concurrency(0), "n"),
        (lambda: Concurrency(None), "n"),  # type: ignore[arg-type]
    ],
)
def test_bad_limit_values_are_refused(make: object, says: str) -> None:
    """A limit that cannot work raises ConfigurationError naming the bad field."""
    with pytest.raises(ConfigurationError, match=says):
        make()  # type: ignore[operator]


def test_rate_takes_seconds_or_a_timedelta() -> None:
    """``per`` may be a number of seconds or a timedelta; both mean the same."""
    assert Rate(10, per=timedelta(minutes=1)) == Rate(10, per=60)
    assert Rate(10).per == 60.0
    assert repr(Concurrency(4)) == "Concurrency(4)"


def test_bad_limits_on_the_app_are_refused(tmp_path: object) -> None:
    """Cairn(limits=...) accepts only non-empty names mapped to Rate or Concurrency."""
    with pytest.raises(ConfigurationError, match=r"limit 'api' is 5; declare it"):
        Cairn("sqlite:///unused.db", limits={"api": 5})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="non-empty"):
        Cairn("sqlite:///unused.db", limits={"": Rate(1)})
    with pytest.raises(ConfigurationError, match="dict"):
        Cairn("sqlite:///unused.db", limits=[Rate(1)])  # type: ignore[arg-type]


def test_app_step_refuses_an_unknown_limit_where_declared(app: Cairn) -> None:
    """``@app.step(limit=...)`` checks the name when the step is declared."""
    with pytest.raises(ConfigurationError, match="no limit named 'nope'"):
        app.step(limit="nope")


# -- keyed limits: bad keys -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Concurrency(2, key="not an argument name"), "must name one of the task"),
        (lambda: Rate(2, key=3), "must name one of the task"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_key_declaration_is_refused(make: object, says: str) -> None:
    """key= must be a task argument's name or a function of the arguments."""
    with pytest.raises(ConfigurationError, match=says):
        make()  # type: ignore[operator]


def test_a_limit_name_holding_the_key_separator_is_refused() -> None:
    """The unit separator joins a keyed limit's name and key, so no name holds it."""
    with pytest.raises(ConfigurationError, match="unit separator"):
        Cairn("sqlite:///unused.db", limits={"a\x1fb": Concurrency(1)})


@pytest.mark.parametrize(
    ("tenant", "ref", "says"),
    [
        ("a\x00b", "api", "NUL character"),
        ("x" * 201, "api", "201 bytes long"),
        ("   ", "api", "must not be empty or blank"),
        (1.5, "api", "must be text or a whole number, not float"),
        ("ok", ("plain", "k"), "'plain'.*is not keyed"),
        ("ok", ("api", None, 3), "limit= must name a limit"),
    ],
)
def test_a_bad_key_fails_the_task_saying_what_was_wrong(
    app: Cairn, tenant: object, ref: object, says: str
) -> None:
    """A key that cannot be stored (NUL, too long, blank, not text), a key given
    to a limit not declared keyed, or a malformed limit= fails the task on its
    first attempt with a message naming the fault; the step is never called."""
    app.limits = {"api": Concurrency(2, key="tenant"), "plain": Concurrency(2)}
    calls: list[object] = []

    @app.task
    def job(ctx: Context, tenant: object) -> None:
        ctx.step("s", calls.append, tenant, limit=ref)  # type: ignore[call-overload]

    with pytest.raises(TaskFailed, match=says):
        app.run(job, tenant=tenant, task_id="t")
    assert calls == []
    record = app.store.get_task("t")
    assert record is not None
    assert record.attempts == 1


def test_a_missing_key_argument_names_the_task_arguments(app: Cairn) -> None:
    """key="tenant" on a task without that argument fails saying which it has."""
    app.limits = {"api": Concurrency(2, key="tenant")}

    @app.task
    def job(ctx: Context, account: str) -> None:
        ctx.step("s", print, account, limit="api")

    with pytest.raises(TaskFailed, match=r"task argument 'tenant'.*its arguments: 'account'"):
        app.run(job, account="x")


def test_keyed_limits_compare_and_show_their_key() -> None:
    """Two limits with the same key are equal; repr shows the key."""
    assert Concurrency(2, key="tenant") == Concurrency(2, key="tenant")
    assert Concurrency(2, key="tenant") != Concurrency(2)
    assert repr(Rate(5, per=1, key="tenant")) == "Rate(5, per=1, key='tenant')"
