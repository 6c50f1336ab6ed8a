"""Properties of ``ctx.once`` over random crash sequences.

A task calls once() for three keys against a fake outside world (a ledger of
acts by key). Up to four consecutive attempts each may die at one fault point
("after_claim", "after_act", "after_record") on one key, or run clean. A process
dying is a ``Crash`` (BaseException) raised by the fault hook; every next attempt
is a NEW ``Cairn`` whose owner is on another host, started once the fake clock
has passed the dead attempt's lease, so it reclaims the task by lease expiry.
After the planned attempts, one clean attempt runs if the task is still
unfinished.

The test runs once per backend, and every example starts from an empty store:
a new SQLite file, or, on PostgreSQL, the test's database (cloned from the
migrated template) with every cairn table emptied. Emptying takes milliseconds,
where cloning a database per example took ~0.4 s: 30 s for the 60 examples,
against ~6 s this way.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cairn import Cairn, Context, Retry, TaskFailed
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import set_fault_hook
from tests.crashes import LEASE, PAST_LEASE
from tests.integration.store.conftest import Backend

KEYS = ("ledger/a", "ledger/b", "ledger/c")
POINTS = ("none", "after_claim", "after_act", "after_record")
POLICIES = ("reconcile", "retry", "raise")

Attempt = tuple[str, int]  # (fault point, index of the key it strikes)
NewStore = Callable[[], AbstractContextManager[str]]
_examples = itertools.count()


class Crash(BaseException):
    """Stands for the process dying at a fault point."""


@dataclass
class Ledger:
    """The outside world: which keys it acted on, and how often."""

    acts: Counter[str] = field(default_factory=Counter)
    # fn called while the key's row already said completed: must stay empty.
    acted_on_completed: list[str] = field(default_factory=list)

    def answer(self, key: str) -> str:
        return f"done {key}"

    def reconcile(self, key: str) -> str | None:
        return self.answer(key) if self.acts[key] else None


@dataclass
class Story:
    """What happened across all attempts of one example."""

    ledger: Ledger = field(default_factory=Ledger)
    crashes_before_act: Counter[str] = field(default_factory=Counter)
    outcome: str = "unfinished"  # then "completed" or "failed"
    error: dict[str, Any] | None = None


def _policy(name: str, ledger: Ledger) -> dict[str, Any]:
    if name == "reconcile":
        return {"reconcile": ledger.reconcile}
    if name == "retry":
        return {"on_doubt": "retry"}
    return {}


def _attempt(url: str, clock: FakeClock, n: int, plan: Attempt, policy: str, story: Story) -> None:
    """One process: runs the task until it ends or the planned crash strikes."""
    point, key_index = plan
    app = Cairn(url, clock=clock, lease=LEASE, task_retry=Retry(attempts=1))
    app.owner = f"host{n}-x/1/1/abc"
    ledger = story.ledger

    def act(key: str) -> str:
        row = app.store.get_operation("", key)
        if row is not None and row.status == "completed":
            ledger.acted_on_completed.append(key)
        ledger.acts[key] += 1
        return ledger.answer(key)

    def crash(at: str, task_id: str, seq: int, name: str) -> None:
        if at == point and name == KEYS[key_index]:
            if at == "after_claim":
                story.crashes_before_act[name] += 1
            raise Crash(f"{at} {name}")

    @app.task(name="three")
    def three(ctx: Context) -> list[str]:
        return [ctx.once(key, act, **_policy(policy, ledger)) for key in KEYS]

    set_fault_hook(app, crash)
    try:
        app.run(three, task_id="three")
        story.outcome = "completed"
    except Crash:
        pass
    except TaskFailed as failed:
        story.outcome = "failed"
        story.error = failed.error
    finally:
        app.close()


def _play(url: str, plan: list[Attempt], policy: str) -> Story:
    clock = FakeClock()
    story = Story()
    for n, attempt in enumerate([*plan, ("none", 0)]):
        if story.outcome != "unfinished":
            break
        _attempt(url, clock, n, attempt, policy, story)
        clock.advance(PAST_LEASE)  # the next process starts after this one's lease
    return story


def _rows(url: str) -> dict[str, Any]:
    app = Cairn(url)
    try:
        return {row.key: row for row in admin(app.store).list_operations()}
    finally:
        app.close()


@contextmanager
def _sqlite_file(folder: Path) -> Iterator[str]:
    path = folder / f"example-{next(_examples)}" / "cairn.db"
    path.parent.mkdir()
    yield f"sqlite:///{path}"


@contextmanager
def _emptied_database(url: str) -> Iterator[str]:
    """The PostgreSQL store at ``url`` with every cairn table but cairn_meta emptied
    (the schema and its version stay, as in a newly migrated database)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'cairn' AND table_name <> 'cairn_meta'"
        ).fetchall()
        # batches last: tasks refer to it. DELETE, not TRUNCATE: faster on tiny tables.
        tables = sorted((name for (name,) in found), key=lambda name: name == "batches")
        conn.execute("; ".join(f"DELETE FROM cairn.{name}" for name in tables))
    yield url


@pytest.fixture
def new_store(store_backend: Backend, tmp_path: Path) -> NewStore:
    """Hands out an empty store of the test's backend each time it is called:
    hypothesis runs many examples in one test call, so a per-test store is not
    enough (a new SQLite file; on PostgreSQL, the test's database emptied)."""
    if store_backend.name == "sqlite":
        return lambda: _sqlite_file(tmp_path)
    return lambda: _emptied_database(store_backend.url)


# new_store is per test, but it hands every example a store of its own.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(POINTS), st.integers(0, len(KEYS) - 1)),
        min_size=1,
        max_size=4,
    ),
    policy=st.sampled_from(POLICIES),
)
def test_once_keeps_its_promises_across_crashes(
    new_store: NewStore, plan: list[Attempt], policy: str
) -> None:
    """Whatever the crashes:
    - fn is never called for a key whose row is completed;
    - reconcile: every key acted exactly once and the task completes;
    - on_doubt="retry": every key acted at least once, the task completes, and the
      row's calls equal the acts plus the claims that died before fn ran (cairn
      cannot tell those from a call, so it counts them);
    - default: no key is ever acted twice; a task that stopped did so with
      InDoubtOperation and its key is in_doubt; a task that completed acted each
      key exactly once.
    """
    with new_store() as url:
        story = _play(url, plan, policy)
        rows = _rows(url)
    event(f"{policy}: {story.outcome}, {sum(story.crashes_before_act.values())} before act")
    acts = story.ledger.acts
    assert story.ledger.acted_on_completed == []
    assert story.outcome in ("completed", "failed")
    if policy in ("reconcile", "retry"):
        assert story.outcome == "completed"
        for key in KEYS:
            assert rows[key].status == "completed"
            assert json.loads(rows[key].result or "null") == f"done {key}"
            assert rows[key].calls == acts[key] + story.crashes_before_act[key]
            if policy == "reconcile":
                assert acts[key] == 1
            else:
                assert acts[key] >= 1
        return
    assert all(count <= 1 for count in acts.values())
    if story.outcome == "completed":
        assert all(acts[key] == 1 for key in KEYS)
        return
    assert story.error is not None
    assert story.error["type"] == "cairn.errors.InDoubtOperation"
    doubtful = [key for key in KEYS if repr(key) in story.error["message"]]
    assert len(doubtful) == 1
    assert rows[doubtful[0]].status == "in_doubt"
