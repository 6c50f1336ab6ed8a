"""The admin API's pure rules: how a stored error and value are shown, how a
step name is grouped, and a batch's rate and ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cairn.admin.batches import pace
from cairn.admin.listing import BadCursor, _decode, _encode, _task_edge
from cairn.admin.views import error_view, value_view
from cairn.blobs.ref import BlobRef
from cairn.observe.step_names import step_groups
from cairn.store.records import BatchSummary

SHA = "ab" * 32
T0 = datetime(2026, 5, 24, 9, 0, tzinfo=UTC)


def test_an_error_is_parsed_into_type_message_and_traceback() -> None:
    """The JSON cairn records; text that is not that JSON; no error at all."""
    view = error_view('{"type": "x.Boom", "message": "it broke", "traceback": "Traceback ..."}')
    assert view is not None
    assert (view.type, view.message, view.traceback) == (
        "x.Boom",
        "it broke",
        "Traceback ...",
    )
    odd = error_view("disk on fire")
    assert odd is not None
    assert (odd.type, odd.message, odd.traceback) == ("?", "disk on fire", None)
    assert error_view('{"message": "no type"}') is not None
    assert error_view(None) is None


def test_a_blob_reference_is_shown_with_its_size_and_hash() -> None:
    """An offloaded value shows where it is, how big, its sha256; never fetched."""
    text = BlobRef(SHA, 20_971_532, "file:///data/blobs/ab/abab").text()
    view = value_view(text, "json")
    assert view is not None
    assert view.blob is not None
    assert (view.blob.size, view.blob.sha256, view.blob.ref) == (
        20_971_532,
        SHA,
        "file:///data/blobs/ab/abab",
    )
    assert view.json_text is None
    assert view.raw is None


def test_values_are_pretty_json_or_raw_never_unpickled() -> None:
    """JSON is pretty-printed; a pickle, damaged JSON or a damaged reference stays raw."""
    view = value_view('{"a":[1,2]}', "json")
    assert view is not None
    assert view.json_text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    pickled = value_view("gASVBQAAAAAAAACMAWGULg==", "pickle")
    assert pickled is not None
    assert pickled.raw == "gASVBQAAAAAAAACMAWGULg=="
    assert pickled.json_text is None
    damaged = value_view("{not json", "json")
    assert damaged is not None
    assert damaged.raw == "{not json"
    broken_ref = value_view("!blob:{oops", "json")
    assert broken_ref is not None
    assert broken_ref.raw == "!blob:{oops"
    assert value_view(None, "json") is None


def test_step_groups_are_slowest_first_with_count_max_and_median() -> None:
    """Three fetch items and one parse step: two groups, the slowest first."""
    rows = [(f"fetch-{n}", T0, T0 + timedelta(seconds=n)) for n in (1, 2, 9)]
    rows.append(("parse", T0, T0 + timedelta(seconds=4)))
    groups = step_groups(rows)
    assert [(g.name, g.count, g.max_seconds, g.median_seconds) for g in groups] == [
        ("fetch-*", 3, 9.0, 2.0),
        ("parse", 1, 4.0, 4.0),
    ]


def _summary(counts: dict[str, int], last: datetime | None) -> BatchSummary:
    return BatchSummary("b", "t", T0, counts, T0, last)


def test_rate_and_eta_run_to_now_while_work_is_left() -> None:
    """30 of 40 done in 10 minutes: 3 a minute, 10 left, 200 s to go."""
    rate, eta = pace(_summary({"completed": 30, "pending": 10}, T0), 30, T0 + timedelta(minutes=10))
    assert rate == pytest.approx(3.0)
    assert eta == pytest.approx(200.0)


def test_a_finished_batch_has_its_rate_to_its_last_finish_and_no_time_left() -> None:
    """Done at minute 5, looked at an hour later: 2 a minute, 0 s left."""
    rate, eta = pace(
        _summary({"completed": 10}, T0 + timedelta(minutes=5)), 10, T0 + timedelta(hours=1)
    )
    assert rate == pytest.approx(2.0)
    assert eta == 0.0


def test_no_rate_before_anything_finished() -> None:
    """Nothing done yet: neither a rate nor an ETA."""
    assert pace(_summary({"pending": 4}, None), 0, T0 + timedelta(minutes=1)) == (None, None)


@pytest.mark.parametrize(
    "cursor",
    [_encode("task", 1, 2), _encode("task", "7"), _encode("task", True), _encode("batch", 3), "!!"],
)
def test_a_damaged_task_cursor_is_a_bad_cursor(cursor: str) -> None:
    """Two positions, a text position, a batch cursor or no base64 at all: BadCursor."""
    with pytest.raises(BadCursor, match="start again from the first page"):
        _task_edge(cursor)


def test_a_task_cursor_round_trips() -> None:
    """A page's cursor gives back its position."""
    assert _task_edge(_encode("task", 123456)) == 123456
    assert _decode("task", _encode("task", 5)) == [5]


def test_tasks_waiting_for_a_signal_are_not_counted_in_the_eta() -> None:
    """30 done in 10 minutes, 10 pending and 20 waiting for a signal: the ETA is
    the 10 pending at 3 a minute; with only waiting tasks left, there is none."""
    now = T0 + timedelta(minutes=10)
    rate, eta = pace(_summary({"completed": 30, "pending": 10, "waiting": 20}, T0), 30, now)
    assert rate == pytest.approx(3.0)
    assert eta == pytest.approx(200.0)
    last = T0 + timedelta(minutes=10)
    rate, eta = pace(_summary({"completed": 30, "waiting": 20}, last), 30, T0 + timedelta(hours=1))
    assert rate == pytest.approx(3.0)
    assert eta is None
