"""The plain values behind a rerun: an entry kept whole as JSON
(``cairn.store.entries``), the keys of one run of one task
(``cairn.keys.run_key``), the fork point, and the filter in words."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cairn.admin.bulk import describe_query
from cairn.admin.reruns import ForkPoint
from cairn.keys import op_key, run_key
from cairn.store.entries import entry_of, entry_text
from cairn.store.records import StepRecord
from cairn.store.reports import TaskQuery

NOW = datetime(2026, 5, 24, 4, 30, tzinfo=UTC)


def _entry(**changes: Any) -> StepRecord:
    base = StepRecord(
        "t/1", 3, "step", "analyze", "completed", '{"a": 1}', 2, 1, 2, None, None, NOW, NOW
    )
    return base._replace(**changes)


def test_an_entry_reads_back_as_it_was_written() -> None:
    """Every field of an entry, times and optional ones included, survives the
    round trip through its JSON text."""
    entries = [
        _entry(),
        _entry(
            error='{"type": "E"}', retry_at=NOW, deferred=1.5, fingerprint="code:ab", kept="code:cd"
        ),
        _entry(kind="op", name="apply/a1", output=None),
    ]
    for entry in entries:
        assert entry_of(entry_text(entry)) == entry


def test_an_entry_kept_before_a_field_existed_gets_its_default() -> None:
    """A field the JSON does not carry (written before the field was added to
    the steps table) reads back as the record's default."""
    text = json.loads(entry_text(_entry(fingerprint="code:ab")))
    del text["fingerprint"], text["kept"], text["deferred"]
    found = entry_of(json.dumps(text))
    assert (found.fingerprint, found.kept, found.deferred) == (None, None, 0.0)


def test_a_run_key_names_the_task_and_its_run() -> None:
    """``run_key`` is the task id, ``#run`` and the run number, then
    ``op_key`` of the parts; each run of a task gets its own key, and two tasks
    whose ids look alike never share one (``op_key`` writes no '#')."""
    assert run_key("reviews/app_id=a1", 2, "summary") == "reviews/app_id=a1#run2/summary"
    assert run_key("t", 1, "x") != run_key("t", 2, "x")
    assert run_key("a#run1/x", 2, "p") != run_key("a", 1, "x#run2", "p")
    assert "#" not in op_key("x#run2", "p")


def test_a_fork_point_is_a_name_or_a_position() -> None:
    """A fork point needs exactly one of a name and a position (from 1), and
    finds the first entry of that name, or that position if recorded."""
    history = {1: _entry(seq=1, name="fetch"), 2: _entry(seq=2), 3: _entry(seq=3)}
    assert ForkPoint(step="analyze").find(history) == 2
    assert ForkPoint(seq=3).find(history) == 3
    assert ForkPoint(seq=9).find(history) is None
    assert ForkPoint(step="nonesuch").find(history) is None
    for bad in ({}, {"step": "a", "seq": 1}, {"seq": 0}):
        with pytest.raises(ValueError, match=r"position|step"):
            ForkPoint(**bad)


def test_a_filter_in_words() -> None:
    """A bulk action's filter, as the confirmation and the audit trail say it."""
    query = TaskQuery(batch="b", status="failed", error_type="builtins.ValueError")
    assert describe_query(query) == "batch=b status=failed error=builtins.ValueError"
    assert describe_query(TaskQuery()) == "every task"
