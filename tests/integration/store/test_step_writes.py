"""The per-step write, on every backend: a clean entry's first write (no error,
retry time, deferral or kept fingerprint) names fewer columns
(``sql.INSERT_CLEAN_STEP``) and must store exactly the row the full insert
stores; both stay fenced, and a rewrite of the position is the full upsert."""

from __future__ import annotations

from datetime import timedelta

from cairn import Cairn
from cairn.clock import FakeClock
from cairn.store.records import NewTask, StepRecord, TaskRecord


def claimed_task(app: Cairn, clock: FakeClock, task_id: str) -> TaskRecord:
    """A task claimed by this test, so its fence is the one to write under."""
    app.store.create_task(NewTask(task_id, "t", "{}", "json"), clock.now())
    lease = clock.now() + timedelta(hours=1)
    claimed = app.store.claim_task(task_id, 0, "test-host/1/0/n", lease, clock.now())
    assert claimed is not None
    return claimed


def entry(task: TaskRecord, seq: int, clock: FakeClock) -> StepRecord:
    """A clean completed step entry at ``seq``."""
    now = clock.now()
    return StepRecord(
        task.id, seq, "step", f"s{seq}", "completed", "41", 1, 1, 1, None, None, now,
        now + timedelta(microseconds=250), 0.0, "code:0123456789abcdef",
    )  # fmt: skip


def test_a_clean_first_write_stores_the_row_the_full_insert_stores(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A clean entry and one that needs every column, each written first at its
    own position, read back exactly as given: the short insert leaves error,
    retry_at, deferred and kept at the values the record holds."""
    task = claimed_task(any_app, clock, "writes/clean")
    clean = entry(task, 1, clock)
    full = entry(task, 2, clock)._replace(
        status="retrying", output=None, error='{"type": "E"}',
        retry_at=clock.now() + timedelta(seconds=3), deferred=1.5, kept="code:feedfacefeedface",
    )  # fmt: skip
    assert any_app.store.record_step(clean, task.fence, first=True)
    assert any_app.store.record_step(full, task.fence, first=True)
    history = any_app.store.load_history(task.id)
    assert history[1] == clean
    assert history[2] == full


def test_a_position_written_again_takes_every_column_of_the_new_record(
    any_app: Cairn, clock: FakeClock
) -> None:
    """A retried position (first=False), and a first write that finds its
    position taken, are the full upsert: the retry's error and time are cleared
    when the call later completes cleanly."""
    task = claimed_task(any_app, clock, "writes/again")
    retrying = entry(task, 1, clock)._replace(
        status="retrying", output=None, error='{"type": "E"}',
        retry_at=clock.now() + timedelta(seconds=3),
    )  # fmt: skip
    assert any_app.store.record_step(retrying, task.fence, first=True)
    done = entry(task, 1, clock)._replace(attempts=2, run_attempts=2)
    assert any_app.store.record_step(done, task.fence, first=True)  # taken: upserted
    assert any_app.store.load_history(task.id)[1] == done
    again = done._replace(output="42")
    assert any_app.store.record_step(again, task.fence)
    assert any_app.store.load_history(task.id)[1] == again


def test_a_clean_write_under_an_old_fence_writes_nothing(any_app: Cairn, clock: FakeClock) -> None:
    """The short insert is fenced like the full one: under a fence that moved it
    is refused (False) and no row appears."""
    task = claimed_task(any_app, clock, "writes/fenced")
    assert not any_app.store.record_step(entry(task, 1, clock), task.fence - 1, first=True)
    assert any_app.store.load_history(task.id) == {}
