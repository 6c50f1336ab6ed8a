"""Rerun from a step, driven from the dashboard in real headless Chromium (the
helpers of ``test_ui_browser``), on a 60-task batch whose ``analyze`` step had a
bug: every outside call is counted at an HTTP server of the test's own.

The batch completes with wrong findings for a third of its apps; the code is
fixed; the whole batch is rerun from ``analyze`` through the task list's bulk
action and its confirmation; the batch runs again. Then: ``fetch`` ran once
per task in all, ``analyze`` twice, the receipt posted with ``ctx.once``
before the fork point once; the diff page lists exactly the tasks whose
findings changed; a task's page shows its two runs; the audit page the action.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from cairn import Cairn, Context, op_key
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing.servers import ApiServer
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.acceptance.test_ui_browser import _by, _errors, _follow, _text, _wait
from tests.acceptance.test_ui_browser import browser as browser  # a fixture, found by name

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

BATCH = "ad-review-2026-05-24"
APPS = [f"app{n:02d}" for n in range(60)]
# The bug: analyze drops the findings of every third app.
BROKEN = {app for n, app in enumerate(APPS) if n % 3 == 0}


def _call(server: ApiServer, path: str) -> str:
    with urllib.request.urlopen(server.url + path, timeout=10) as answer:  # noqa: S310 - local
        answer.read()
    return path


def _app(path: Path, server: ApiServer, fixed: list[bool]) -> Cairn:
    app = Cairn(f"sqlite:///{path}", clock=FakeClock())

    @app.task
    def review(ctx: Context, app_id: str) -> dict[str, Any]:
        settings = ctx.step(
            "fetch", lambda: {"app": app_id, "fetched": _call(server, f"/fetch/{app_id}")}
        )
        ctx.once(op_key("receipt", app_id), lambda key: _call(server, f"/receipt/{app_id}"))

        def analyze() -> list[str]:
            _call(server, f"/analyze/{app_id}")
            if app_id in BROKEN and not fixed[0]:
                return []  # the bug
            return [f"{settings['app']}: floor price too low"]

        findings = ctx.step("analyze", analyze)
        return {"app": app_id, "findings": findings}

    return app


def _calls(server: ApiServer) -> Counter[str]:
    return Counter(arrival.path.rsplit("/", 1)[0] for arrival in server.arrivals)


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[tuple[Cairn, ApiServer, list[bool], str]]:
    """The batch run once with the bug, and the dashboard over its store."""
    fixed = [False]
    with ApiServer() as server:
        app = _app(tmp_path / "reviews.db", server, fixed)
        report = app.run_batch(
            BATCH, app.registered("review"), [{"app_id": a} for a in APPS], progress=False
        )
        assert report.completed == len(APPS)
        config = UIConfig(admin(app.store), FakeClock().now, poll_seconds=0.2, actor_name="mika")
        dashboard = DashboardServer(("127.0.0.1", 0), config)
        thread = serve_in_thread(dashboard)
        try:
            yield app, server, fixed, dashboard.url
        finally:
            dashboard.shutdown()
            dashboard.server_close()
            thread.join()
            app.close()


def test_a_batch_rerun_from_analyze_from_the_dashboard(
    browser: Any, batch: tuple[Cairn, ApiServer, list[bool], str]
) -> None:
    """The operator's loop, end to end: bulk rerun from analyze (confirmed for
    all 60 tasks), the batch run again with the fixed code, then the counts
    at the server, the diff, the lineage and the audit trail."""
    app, server, fixed, url = batch
    by, driver = _by(), browser
    driver.get(url + "/tasks?" + f"batch={quote(BATCH)}")
    driver.find_element(by.ID, "bulk-from").send_keys("analyze")
    _follow(driver, by.ID, "bulk-rerun")
    assert _text(driver, "#confirm-count") == str(len(APPS))
    assert len(driver.find_elements(by.CSS_SELECTOR, "#rerun-plan tbody tr")) == 50  # listed
    assert "3 analyze" in _text(driver, "#rerun-plan tbody tr")  # fetch, receipt, analyze
    _follow(driver, by.ID, "confirm")
    assert driver.current_url.endswith(f"/diff?batch={quote(BATCH)}")
    assert {t.status for t in admin(app.store).list_tasks()} == {"pending"}

    fixed[0] = True  # the code is fixed, then the batch runs again
    report = app.run_batch(BATCH, app.registered("review"), progress=False)
    assert report.completed == len(APPS)
    calls = _calls(server)
    assert calls == Counter({"/fetch": 60, "/receipt": 60, "/analyze": 120})
    per_app = Counter(arrival.path for arrival in server.arrivals)
    assert all(per_app[f"/fetch/{a}"] == 1 and per_app[f"/receipt/{a}"] == 1 for a in APPS)
    assert all(per_app[f"/analyze/{a}"] == 2 for a in APPS)

    _wait(driver, lambda d: _text(d, "#diff-results") == str(len(BROKEN)))
    rows = driver.find_elements(by.CSS_SELECTOR, "#diff tr.diff-row")
    listed = {row.find_element(by.CSS_SELECTOR, "td a").text for row in rows}
    assert listed == {f"{BATCH}/app_id={a}" for a in BROKEN}
    assert _text(driver, "#diff-changed") == str(len(BROKEN))
    first = next(iter(sorted(BROKEN)))
    driver.get(url + f"/task?id={quote(f'{BATCH}/app_id={first}', safe='')}")

    def run_rows(d: Any) -> list[str] | None:
        # Read whole, again if a live update replaced the table meanwhile (_wait).
        texts = [row.text for row in d.find_elements(by.CSS_SELECTOR, "#runs tbody tr")]
        return texts if [t.split()[0] for t in texts if t] == ["1", "2"] else None

    runs = _wait(driver, run_rows)
    assert "3 analyze" in runs[0]
    assert "ui:mika" in runs[0]
    driver.get(url + "/audit")
    (entry,) = driver.find_elements(by.CSS_SELECTOR, "#audit tbody tr")
    cells = [cell.text for cell in entry.find_elements(by.TAG_NAME, "td")]
    assert cells[2:6] == ["ui:mika", "rerun", f"batch={BATCH}", str(len(APPS))]
    assert _errors(driver) == []
    result = app.store.get_task(f"{BATCH}/app_id={first}")
    assert result is not None
    assert json.loads(result.result or "{}")["findings"] == [f"{first}: floor price too low"]
