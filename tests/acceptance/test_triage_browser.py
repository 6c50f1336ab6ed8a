"""Triage at a glance in real headless Chromium: a failed batch's task list at
1400 px and on a 390 px phone shows each task's status, attempts, duration,
the step it failed in (or the step in flight) and its error's type and first
line without sideways scrolling; the failed tasks group by error type, and
choosing a group filters the list.

With ``CAIRN_WRITE_SCREENSHOTS=1`` it writes the screenshots of
``docs/dashboard.md`` (``dashboard-triage-wide.png``, ``dashboard-triage-phone.png``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import InFlightNote, NewTask
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.acceptance.test_ui_browser import _by, _errors, _follow, _shot, _text, browser

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]
__all__ = ["browser"]  # the fixture, shared with the dashboard's other browser tests

BATCH = "nightly-2026-05-24"


def _failed_batch(path: Path, clock: FakeClock) -> Cairn:
    """A 30-task batch: 12 complete, 10 fail in analyze (a ValueError whose
    message holds markup), 6 in fetch (a TimeoutError), 2 in fetch with
    arguments cairn hashes into their id; and one task running elsewhere, in
    its step ``summarize`` for ten minutes."""
    app = Cairn(f"sqlite:///{path / 'triage.db'}", clock=clock)

    @app.task(name="review")
    def review(ctx: Context, app_id: str) -> str:
        def fetch() -> str:
            clock.advance(1.5)
            if app_id.startswith("slow"):
                raise TimeoutError(f"store API did not answer for {app_id} within 30 s")
            return app_id

        def analyze(text: str) -> str:
            clock.advance(4.0)
            if app_id.startswith("bad"):
                raise ValueError(f"findings for <b>{app_id}</b> cite no evidence\nsee the prompt")
            return text.upper()

        return str(ctx.step("analyze", analyze, ctx.step("fetch", fetch)))

    items = [f"ok{n}" for n in range(12)] + [f"bad{n}" for n in range(10)]
    items += [f"slow{n}" for n in range(6)] + ["slow app/with spaces", "slow ümlaut/x"]
    app.run_batch(BATCH, review, [{"app_id": i} for i in items], concurrency=1, progress=False)
    now = clock.now()
    app.store.create_task(NewTask("nightly-2026-05-24/long", "review", "{}", "json", BATCH), now)
    claimed = app.store.claim_task(
        "nightly-2026-05-24/long", 0, "worker-2/41/0/n", now + timedelta(days=1), now
    )
    assert claimed is not None
    note = InFlightNote(claimed.id, claimed.fence, 2, "summarize", now - timedelta(minutes=10))
    app.store.note_in_flight([note])
    return app


@pytest.fixture
def triage_url(tmp_path: Path, browser: Any) -> Iterator[str]:
    """The dashboard over the failed batch."""
    clock = FakeClock()
    app = _failed_batch(tmp_path, clock)
    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), clock.now))
    thread = serve_in_thread(server)
    yield server.url
    browser.get("about:blank")
    browser.get_log("browser")
    server.shutdown()
    server.server_close()
    thread.join()
    app.close()


def _within_view(driver: Any, selector: str) -> bool:
    """Every element ``selector`` finds lies inside the window's width."""
    script = (
        "const w = window.innerWidth; return [...document.querySelectorAll(arguments[0])]"
        ".every(e => { const r = e.getBoundingClientRect(); return r.left >= 0 && r.right <= w; });"
    )
    return bool(driver.execute_script(script, selector))


def test_a_failed_batch_reads_at_a_glance_wide_and_on_a_phone(
    browser: Any, triage_url: str
) -> None:
    """At 1400 px every column of every row is on screen; the groups count the
    failures by type (10 ValueError, 8 TimeoutError); a group filters the list
    to its tasks; the running task shows its step in flight and for how long;
    a hashed id shows the key as given. At 390 px the page does not scroll
    sideways and each row's status, step and error are on screen."""
    by, driver = _by(), browser
    driver.set_window_size(1400, 1000)
    try:
        driver.get(triage_url + f"/tasks?batch={BATCH}")
        groups = [g.text for g in driver.find_elements(by.CSS_SELECTOR, "#error-groups a.group")]
        assert groups == ["ValueError 10", "TimeoutError 8"]
        assert _within_view(driver, "#tasks th, #tasks td")
        rows = driver.find_elements(by.CSS_SELECTOR, "#tasks tbody tr")
        assert len(rows) == 31
        assert "in summarize for 10 min" in rows[0].text
        keys = [e.text for e in driver.find_elements(by.CSS_SELECTOR, "#tasks a.key")]
        assert "app_id=slow app/with spaces" in keys
        assert not [k for k in keys if "sha256:" in k]
        _shot(driver, "triage-wide")
        _follow(driver, by.LINK_TEXT, "TimeoutError 8")
        assert _text(driver, "#total") == "8 tasks"
        cells = driver.find_elements(by.CSS_SELECTOR, "#tasks td.err")
        assert all(c.text.startswith("TimeoutError store API did not answer") for c in cells)
        steps = {c.text for c in driver.find_elements(by.CSS_SELECTOR, "#tasks td.step")}
        assert steps == {"failed in fetch"}
        driver.set_window_size(390, 844)
        driver.get(triage_url + f"/tasks?batch={BATCH}&status=failed")
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= driver.execute_script("return window.innerWidth")
        assert _within_view(driver, "#tasks td.err, #tasks td.step, #tasks .status")
        assert "findings for <b>bad" in _text(driver, "#tasks")
        _shot(driver, "triage-phone")
        assert _errors(driver) == []
    finally:
        driver.set_window_size(1280, 900)
