"""The dashboard in real headless Chromium: every page loads without console
errors, links lead where they say, and Retry on a failed task makes it pending.

Needs Debian's ``chromium`` and ``chromium-driver``; skipped without them,
except in CI (``CI=true``), where their absence fails the test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, NoReturn

import pytest

from cairn import Cairn, Context
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.store.records import NewTask
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread

pytestmark = pytest.mark.acceptance

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser test needs Chromium in CI: {reason}")
    pytest.skip(f"Chromium not available: {reason} (apt-get install chromium chromium-driver)")


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium driven by selenium through Debian's chromedriver."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed (pip install -e '.[test]')")
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        _missing("no chromium or chromedriver on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(20)
    yield driver
    driver.quit()


@pytest.fixture
def dashboard(app: Cairn, clock: FakeClock) -> Iterator[str]:
    """A dashboard over a store with a batch (one task failed) and a stalled task."""

    @app.task(name="review")
    def review(ctx: Context, n: int) -> int:
        def check() -> int:
            if n == 1:
                raise ValueError("<b>not bold</b>")  # shown escaped
            return n

        ctx.once(f"notify/{n}", lambda key: key)
        return int(ctx.step("check", check))

    app.run_batch("reviews-2026-05-24", review, [{"n": n} for n in range(3)], progress=False)
    app.store.create_task(NewTask("stuck/1", "stuck", "{}", "json"), clock.now())
    assert app.store.claim_task(
        "stuck/1", 0, "far/1/0/n", clock.now() + timedelta(days=1), clock.now()
    )
    clock.advance(3600)
    server = DashboardServer(("127.0.0.1", 0), UIConfig(admin(app.store), clock.now))
    thread = serve_in_thread(server)
    yield server.url
    server.shutdown()
    server.server_close()
    thread.join()


def _follow(driver: Any, by: str, value: str) -> None:
    """Click a link or button and wait until the next page has replaced this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(by, value).click()
    WebDriverWait(driver, 10).until(expected_conditions.staleness_of(page))


def _errors(driver: Any) -> list[dict[str, object]]:
    logs = driver.get_log("browser")
    return [entry for entry in logs if entry.get("level") == "SEVERE"]


def test_pages_links_and_retry(browser: Any, dashboard: str) -> None:
    """Each page renders; batch -> tasks -> task links work; Retry moves the failed
    task to pending; no console errors anywhere (a Content-Security-Policy
    violation is one: Chromium logs it as SEVERE)."""
    from selenium.webdriver.common.by import By

    driver = browser
    for path, heading in [
        ("/", "Batches"),
        ("/tasks", "Tasks"),
        ("/ops", "Operations"),
        ("/stalls", "Stalls"),
        ("/metrics", "Metrics"),
    ]:
        driver.get(dashboard + path)
        assert driver.find_element(By.TAG_NAME, "h1").text == heading
        assert _errors(driver) == [], path
    driver.get(dashboard + "/stalls")
    assert "stuck/1" in driver.find_element(By.TAG_NAME, "table").text
    driver.get(dashboard + "/")
    _follow(driver, By.LINK_TEXT, "reviews-2026-05-24")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Tasks of reviews-2026-05-24"
    _follow(driver, By.LINK_TEXT, "failed")
    _follow(driver, By.LINK_TEXT, "reviews-2026-05-24/n=1")
    assert driver.find_element(By.ID, "status").text == "failed"
    assert "<b>not bold</b>" in driver.find_element(By.TAG_NAME, "pre").text
    _follow(driver, By.ID, "retry")
    assert driver.find_element(By.ID, "status").text == "pending"
    assert _errors(driver) == []


def test_token_required_beyond_loopback(app: Cairn, clock: FakeClock) -> None:
    """Binding beyond 127.0.0.1 needs a token; then every request must carry it,
    the cookie it sets is a session id, and a same-origin POST without the page's
    form secret is refused."""
    import httpx

    from cairn.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="token"):
        DashboardServer(("0.0.0.0", 0), UIConfig(admin(app.store), clock.now))  # noqa: S104
    server = DashboardServer(("0.0.0.0", 0), UIConfig(admin(app.store), clock.now, token="s3cret"))  # noqa: S104, S106
    thread = serve_in_thread(server)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert httpx.get(f"{url}/tasks").status_code == 401
        assert httpx.get(f"{url}/tasks?token=wrong").status_code == 401
        ok = httpx.get(f"{url}/tasks?token=s3cret")
        assert ok.status_code == 200
        assert "cairn_session=" in ok.headers["set-cookie"]
        assert "s3cret" not in ok.headers["set-cookie"]
        bearer = {"Authorization": "Bearer s3cret"}
        assert httpx.get(f"{url}/ops", headers=bearer).status_code == 200
        # Same origin, so the form secret is what refuses it.
        forged = httpx.post(
            f"{url}/task/retry", data={"id": "x"}, headers={**bearer, "Origin": url}
        )
        assert forged.status_code == 403
        assert "stale or missing form" in forged.text
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
