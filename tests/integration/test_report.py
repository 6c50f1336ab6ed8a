"""The daily report: its text counts the day's work, and posting it twice (a cron
job fired twice, a rerun) delivers it once.

The tests on every backend are in ``store/test_report.py``.
"""

from __future__ import annotations

from typer.testing import CliRunner

from cairn import Cairn
from cairn.cli import app as cli_app
from cairn.clock import FakeClock, SystemClock
from tests.integration.store.test_report import DAY, run_day
from tests.servers import WebhookServer


def test_cli_report_and_post(app: Cairn, clock: FakeClock) -> None:
    """`cairn report --day` prints the report; `--post --webhook` posts it once."""
    run_day(app)
    runner = CliRunner()
    url = app.store.url
    shown = runner.invoke(cli_app, ["report", "--store", url, "--day", DAY.isoformat()])
    assert shown.exit_code == 0, shown.output
    assert "3 completed, 1 failed" in shown.stdout
    since = runner.invoke(cli_app, ["report", "--store", url, "--since", "2026-05-01"])
    assert "4 task(s)" in since.stdout
    with WebhookServer() as chat:
        post = ["report", "--store", url, "--day", DAY.isoformat(), "--post", "--webhook", chat.url]
        for _ in range(2):
            result = runner.invoke(cli_app, post)
            assert result.exit_code == 0, result.output
        assert len(chat.delivered) == 1
    assert runner.invoke(cli_app, ["report", "--store", url, "--post"]).exit_code == 2


def test_cli_report_refuses_a_day_not_over(app: Cairn) -> None:
    """`cairn report --day TODAY` is refused with what to do; with --partial it prints."""
    today = SystemClock().now().date().isoformat()
    runner = CliRunner()
    refused = runner.invoke(cli_app, ["report", "--store", app.store.url, "--day", today])
    assert refused.exit_code != 0
    assert "is not over yet" in refused.output
    assert "--partial" in refused.output
    shown = runner.invoke(
        cli_app, ["report", "--store", app.store.url, "--day", today, "--partial"]
    )
    assert shown.exit_code == 0, shown.output
