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
    Rate,
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
