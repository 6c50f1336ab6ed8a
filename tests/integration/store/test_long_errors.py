"""An exception whose message is a megabyte, on each store: what is recorded is
bounded, says it was cut, and keeps the type and the start.

Each attempt of a task writes its errors (the task's, the failed step's, the
failed operation's), so an unbounded message would be stored in full once per
attempt. ``cairn.engine.errortext`` keeps every recorded error to
``ERROR_TEXT_LIMIT`` bytes: the message's and the traceback's first and last
parts, joined by a line saying how many characters were cut there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, Retry, TaskFailed
from cairn.cli import app as cli
from cairn.engine.errortext import ERROR_TEXT_LIMIT
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.integration.test_ui_cost import _get

MEGABYTE = ("a megabyte of text, \u00e9 and \U0001f600; " * 40_000)[:1_000_000]
MESSAGE = "it starts here. " + MEGABYTE + " and it ends here"
_CUT = re.compile(r"\n\[\.\.\. cairn cut ([\d,]+) characters here: [^\]]*\]\n")


class Huge(Exception):
    """Raised with a megabyte of text."""


def _raise(*_: Any) -> None:
    raise Huge(MESSAGE)


RAISED_IN: dict[str, Callable[[Context], Any]] = {
    "a step": lambda ctx: ctx.step("fetch", _raise),
    "an operation": lambda ctx: ctx.once("charge", _raise),
    "the task": lambda ctx: _raise(),
}


def _check_bounded(stored: str | None, where: str) -> dict[str, Any]:
    """``stored`` is a bounded record of ``Huge(MESSAGE)``: at most the limit in
    UTF-8, the type kept, the message's start and end kept around a marker
    whose count is what the marker replaced."""
    assert stored is not None, where
    assert len(stored.encode("utf-8")) <= ERROR_TEXT_LIMIT, (where, len(stored))
    error: dict[str, Any] = json.loads(stored)
    assert error["type"].endswith("test_long_errors.Huge"), where
    message = error["message"]
    marker = _CUT.search(message)
    assert marker is not None, (where, message[:200])
    head, tail = message[: marker.start()], message[marker.end() :]
    assert MESSAGE.startswith(head), where
    assert MESSAGE.endswith(tail), where
    assert head.startswith("it starts here. a megabyte"), where
    assert tail.endswith(" and it ends here"), where
    assert len(head) + int(marker.group(1).replace(",", "")) + len(tail) == len(MESSAGE)
    assert len(head) > 10_000, f"{where}: the message kept only {len(head)} characters"
    assert _CUT.search(error["traceback"]), f"{where}: the traceback was not cut"
    return error


def _stored_errors(app: Cairn, task_id: str) -> dict[str, str | None]:
    """Every error column the task's rows hold, by where it is."""
    record = app.store.get_task(task_id)
    assert record is not None
    found: dict[str, str | None] = {"tasks.error": record.error}
    for seq, entry in app.store.load_history(task_id).items():
        if entry.error is not None:
            found[f"steps.error at {seq}"] = entry.error
    for op in admin(app.store).list_operations():
        if op.task_id == task_id:
            found[f"operations.error of {op.key}"] = op.error
    return found


@pytest.mark.parametrize("where", sorted(RAISED_IN))
def test_a_megabyte_message_is_recorded_bounded_and_the_task_ends_failed(
    any_app: Cairn, where: str
) -> None:
    """On either store, a megabyte exception raised in a step, an operation or the
    task itself, on both of two attempts: the task ends failed (never left
    running); every error column it wrote (the task's, and the step's or the
    operation's) holds at most ERROR_TEXT_LIMIT bytes, the exception's type,
    the message's start and end, and a marker counting what was cut; TaskFailed
    quotes the same bounded record."""
    raise_it = RAISED_IN[where]

    @any_app.task(name="huge", retry=Retry(attempts=2, initial_delay=0))
    def huge(ctx: Context) -> None:
        raise_it(ctx)

    with pytest.raises(TaskFailed) as failed:
        any_app.run(huge, task_id="huge")
    record = any_app.store.get_task("huge")
    assert record is not None
    assert (record.status, record.attempts) == ("failed", 2)
    stored = _stored_errors(any_app, "huge")
    expected = {"a step": "steps.error at 1", "an operation": "operations.error of charge"}
    assert set(stored) == {"tasks.error"} | ({expected[where]} if where in expected else set())
    for column, text in stored.items():
        _check_bounded(text, f"{where}, {column}")
    assert failed.value.error == json.loads(stored["tasks.error"] or "")
    assert len(str(failed.value)) < ERROR_TEXT_LIMIT


def test_cairn_show_and_the_dashboard_show_a_cut_error(any_app: Cairn) -> None:
    """On either store, the task page of the dashboard and ``cairn show`` (text
    and ``--json``) show the bounded error of a megabyte exception: its type,
    the message's start and the line saying how much was cut."""

    @any_app.task(name="huge", retry=Retry(attempts=1))
    def huge(ctx: Context) -> None:
        ctx.step("fetch", _raise)

    with pytest.raises(TaskFailed):
        any_app.run(huge, task_id="huge")

    runner = CliRunner()
    shown = runner.invoke(cli, ["show", "huge", "--store", any_app.store_url])
    assert shown.exit_code == 0, shown.output[:500]
    flat = " ".join(shown.output.split())
    assert "Huge: it starts here. a megabyte of text" in flat
    assert "cairn cut 9" in flat  # 9xx,xxx characters
    as_json = runner.invoke(cli, ["show", "huge", "--store", any_app.store_url, "--json"])
    assert as_json.exit_code == 0, as_json.output[:500]
    task = json.loads(as_json.stdout)["task"]
    assert _CUT.search(task["error"]["message"])

    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(any_app.store), any_app.clock.now))
    thread = serve_in_thread(server)
    try:
        status, page = _get(int(server.server_address[1]), f"/task?id={quote('huge')}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert status == 200
    assert 'test_long_errors.Huge</span>: <span class="message">it starts here.' in page
    assert "cairn cut 9" in page
    assert len(page.encode("utf-8")) < 4 * ERROR_TEXT_LIMIT + 20_000
