"""A handoff's carried archive, read on the store it was carried to.

Day 1 runs on one SQLite store and hands off with its archive
(``archive="inline"`` or ``"blob"``); Day 2 starts from the document on a
second SQLite store, which holds none of Day 1's rows. There the carried rows
are read through each public reader: ``conv.history()`` inside the task,
``iter_history`` / ``carried_history`` outside it, and ``cairn conversation --all``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.agent import carried_history, handoff_archive, iter_history, user
from cairn.agent.message_blobs import MessageReader
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from tests.agent_server import SYSTEM

ROWS = 84


def _day1(ctx: Context) -> dict[str, Any]:
    """Appends and compacts until the conversation holds exactly ``ROWS`` rows,
    then hands off with the archive inline."""
    conv = ctx.conversation("main", system=SYSTEM, threshold=120, keep_tail=40)
    turn = 0
    while conv.position < ROWS:
        conv.append(user(f"note {turn}: the meeting moved to room {100 + turn}"))
        turn += 1
        if conv.position < ROWS:
            conv.compact()
    return conv.handoff({"day": 1}, archive="inline")


def _day2(ctx: Context, doc: dict[str, Any]) -> dict[str, Any]:
    """Starts from Day 1's document, adds one message, and reads its history."""
    conv = ctx.conversation("main", start_from=doc)
    conv.append(user("Day 2 starts."))
    return {"history": [row.to_json() for row in conv.history()], "from": conv.handed_off}


@pytest.fixture
def day1_doc(app: Cairn) -> dict[str, Any]:
    """Day 1's handoff document, archive inline (run on the ``app`` store)."""
    doc: dict[str, Any] = app.run(app.task(name="day1")(_day1), task_id="day1")
    return doc


def _carried_states(output: str) -> list[str]:
    return re.findall(r"^\s*\d+\s+carried from (\w+)\s", output, re.M)


def test_the_carried_archive_is_read_on_the_second_store_through_each_reader(
    day1_doc: dict[str, Any], tmp_path: Path
) -> None:
    """All 84 rows Day 1 handed off (archive inline) are on Day 2's store, in
    Day 1's order and marked as carried from day1, before Day 2's own rows:
    through conv.history(), iter_history (and carried_history), and
    cairn conversation --all (table and --jsonl)."""
    carried_rows = day1_doc["archive"]["rows"]
    assert [row["idx"] for row in carried_rows] == list(range(ROWS))
    assert sum(row["kind"] == "summary" for row in carried_rows) >= 5
    path = tmp_path / "day2.db"
    day2_app = Cairn(f"sqlite:///{path}", clock=FakeClock())
    try:
        task = day2_app.task(name="day2", retry=None)(_day2)
        inside = day2_app.run(task, task_id="day2", doc=day1_doc)
        reader = MessageReader(day2_app.blobs)
        messages = handoff_archive(inside["from"], reader.load)
        outside = list(iter_history(day2_app.store, "day2", "main"))
        alone = carried_history(day2_app.store, "day2")
        own = day2_app.store.load_messages("day2", "main", 0, 1000)
    finally:
        day2_app.close()
    mark = {"task_id": "day1", "conversation": "main", "created_at": day1_doc["created_at"]}
    expected = [{**row, "carried": mark} for row in carried_rows]
    assert inside["history"][:ROWS] == expected
    assert [row.to_json() for row in outside[:ROWS]] == expected
    assert [row.to_json() for row in alone] == expected
    assert [row.carried for row in outside[ROWS:]] == [None] * len(own)
    assert [row.idx for row in outside[ROWS:]] == [r.idx for r in own]
    assert inside["history"][-1]["message"] == user("Day 2 starts.")
    # On Day 2's store the archive is in its blob store, read back with ``load``.
    assert inside["from"]["archive"]["blob"].startswith("!blob:")
    assert messages == [row["message"] for row in carried_rows if row["kind"] == "message"]
    cli = CliRunner()
    table = cli.invoke(cli_app, ["conversation", "day2", "--all", "--store", str(path)])
    assert table.exit_code == 0, table.output
    assert _carried_states(table.output) == ["day1"] * ROWS
    jsonl = cli.invoke(cli_app, ["conversation", "day2", "--all", "--jsonl", "--store", str(path)])
    lines = [json.loads(line) for line in jsonl.output.splitlines()]
    assert lines[:ROWS] == expected
    assert len(lines) == ROWS + len(own)


def test_a_second_handoff_carries_the_first_ones_rows_with_their_mark(
    day1_doc: dict[str, Any], tmp_path: Path
) -> None:
    """Day 2 hands off again with its archive: the document carries Day 1's
    rows (still marked as from day1) then Day 2's, and Day 3 on a third store
    reads them all, in that order."""
    day2_app = Cairn(f"sqlite:///{tmp_path / 'day2.db'}", clock=FakeClock())
    try:

        @day2_app.task(name="day2", retry=None)
        def day2(ctx: Context, doc: dict[str, Any]) -> dict[str, Any]:
            conv = ctx.conversation("main", start_from=doc)
            conv.append(user("Day 2 starts."))
            return conv.handoff({"day": 2}, archive="inline")

        doc2 = day2_app.run(day2, task_id="day2", doc=day1_doc)
    finally:
        day2_app.close()
    day3_app = Cairn(f"sqlite:///{tmp_path / 'day3.db'}", clock=FakeClock())
    try:
        task = day3_app.task(name="day3", retry=None)(_day2)
        day3 = day3_app.run(task, task_id="day3", doc=doc2)
    finally:
        day3_app.close()
    origins = [row["carried"]["task_id"] for row in day3["history"] if "carried" in row]
    day2_rows = len(doc2["archive"]["rows"]) - ROWS
    assert origins == ["day1"] * ROWS + ["day2"] * day2_rows
    assert day3["history"][ROWS + day2_rows - 1]["message"] == user("Day 2 starts.")
