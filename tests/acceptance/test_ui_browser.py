"""The dashboard in real headless Chromium (Debian's, driven by selenium), over a
store built by running real tasks (``dashboard_data``): every page renders
without console errors, a live page changes without a reload, each button
does what it says in the store, and DNS rebinding and a cross-site POST are
refused.

Needs Debian's ``chromium`` and ``chromium-driver``; skipped without them,
except in CI (``CI=true``), where their absence fails the test. With
``CAIRN_WRITE_SCREENSHOTS=1`` it also writes the screenshots of
``docs/dashboard.md`` to ``docs/images/``.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

from cairn import Cairn
from cairn.agent.costs import COST_COLUMNS
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.acceptance.dashboard_data import BATCH, IDS, build
from tests.agent_server import DocReader, model_server
from tests.cost_run import COST_BATCH, READER, cairn, cairn_cost, cost_run

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

EVIL = "evil.example"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    # The rebinding attacker's name resolves to this machine, as after a rebind.
    f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",
)
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
WAIT = 15


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the browser test needs Chromium in CI: {reason}")
    pytest.skip(f"Chromium not available: {reason} (apt-get install chromium chromium-driver)")


@pytest.fixture(scope="module")
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
    driver.set_window_size(1280, 900)
    yield driver
    driver.quit()


@dataclass
class Dash:
    app: Cairn
    server: DashboardServer
    clock: FakeClock

    @property
    def url(self) -> str:
        return self.server.url

    def status(self, task_id: str) -> str:
        task = self.app.store.get_task(task_id)
        assert task is not None
        return task.status


@pytest.fixture
def dash(tmp_path: Path, browser: Any) -> Iterator[Dash]:
    """The dashboard over a store with one of everything, polling every 0.2 s.
    The browser leaves its pages before the server stops, so no poll of a
    stopped server shows up as a console error in the next test."""
    clock = FakeClock()
    app = build(tmp_path, clock)
    config = UIConfig(admin(app.store), clock.now, poll_seconds=0.2)
    server = DashboardServer(("127.0.0.1", 0), config)
    thread = serve_in_thread(server)
    yield Dash(app, server, clock)
    browser.get("about:blank")
    browser.get_log("browser")
    server.shutdown()
    server.server_close()
    thread.join()
    app.close()


def _by() -> Any:
    from selenium.webdriver.common.by import By

    return By


def _wait(driver: Any, condition: Any) -> Any:
    """Until ``condition`` holds. A live update may replace an element between
    finding it and reading it (a stale reference): the condition is asked again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException])
    return wait.until(condition)


def _follow(driver: Any, by: str, value: str) -> None:
    """Click a link or button and wait until the next page has replaced this one."""
    from selenium.webdriver.support import expected_conditions

    page = driver.find_element(_by().TAG_NAME, "html")
    driver.find_element(by, value).click()
    _wait(driver, expected_conditions.staleness_of(page))


def _errors(driver: Any) -> list[dict[str, object]]:
    """The console's errors since the last look (a CSP violation is one)."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def _task(task_id: str) -> str:
    return f"/task?id={quote(task_id, safe='')}"


def _text(driver: Any, selector: str) -> str:
    return str(driver.find_element(_by().CSS_SELECTOR, selector).text)


def _shot(driver: Any, name: str) -> None:
    if os.environ.get("CAIRN_WRITE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(IMAGES / f"dashboard-{name}.png"))


PAGES = [
    ("/", "Batches", "batches"),
    (f"/batch?name={BATCH}", f"Batch {BATCH}", "batch"),
    ("/tasks", "Tasks", "tasks"),
    (_task(IDS.failed), f"Task {IDS.failed}", "task-failed"),
    (_task(IDS.parent), f"Task {IDS.parent}", "task-spawn"),
    (_task(IDS.agent), f"Task {IDS.agent}", None),
    (f"/conversation?task={quote(IDS.agent, safe='')}", None, "conversation"),
    ("/ops", "Operations", "ops"),
    ("/stalls", "Stalls", None),
    ("/metrics", "Metrics", "metrics"),
]


def test_every_page_renders_with_real_data_and_no_console_errors(browser: Any, dash: Dash) -> None:
    """Each page shows its data with no console error (Chromium logs a CSP
    violation as SEVERE), the live pages say "live", and the facts are right:
    grouped failures, the failed task's type, message and traceback, a spawn
    row linking its child, a blob shown by size and hash, summaries of the agent's
    conversation, the grouped metrics, and internal tasks only when asked."""
    by, driver = _by(), browser
    for path, heading, shot in PAGES:
        driver.get(dash.url + path)
        if heading is not None:
            assert _text(driver, "h1") == heading, path
        assert _errors(driver) == [], path
        if shot is not None:
            _shot(driver, shot)
    driver.get(dash.url + f"/batch?name={BATCH}")
    assert "builtins.ValueError" in _text(driver, "#failures")
    assert _text(driver, "#live-state") == "live"
    driver.get(dash.url + _task(IDS.failed))
    assert _text(driver, ".error .type") == "builtins.ValueError"
    assert "the <b>invoice</b> total" in _text(driver, ".error .message")
    driver.find_element(by.CSS_SELECTOR, ".error summary").click()  # the traceback opens
    assert "Traceback (most recent call last)" in _text(driver, ".error .traceback")
    assert driver.find_elements(by.CSS_SELECTOR, "svg.gantt rect")
    driver.get(dash.url + _task(IDS.parent))
    _follow(driver, by.CSS_SELECTOR, "a.child")
    assert _text(driver, "h1") == "Task parent/1/seven"
    driver.get(dash.url + _task(IDS.blob))
    assert "KiB" in _text(driver, ".blob")
    assert "sha256" in _text(driver, ".blob")
    driver.get(dash.url + f"/conversation?task={quote(IDS.agent, safe='')}")
    assert driver.find_elements(by.CSS_SELECTOR, "#summaries tbody tr")
    assert driver.find_elements(by.CSS_SELECTOR, "#calls tbody tr")
    _follow(driver, by.ID, "archive")
    assert _text(driver, "h2:nth-of-type(2)") == "Archive"
    driver.get(dash.url + "/metrics?since=2000-01-01")  # the durability metrics: a window
    groups = [row.text for row in driver.find_elements(by.CSS_SELECTOR, "#step-groups tbody tr")]
    assert [row for row in groups if row.startswith("read doc")] == ["read doc-* 6 0 ms 0 ms 0 ms"]
    driver.get(dash.url + "/tasks")
    assert IDS.internal not in _text(driver, "#tasks")
    driver.get(dash.url + "/tasks?internal=1")
    assert IDS.internal in _text(driver, "#tasks")
    assert _errors(driver) == []


def test_search_filters_and_paging_both_ways(browser: Any, dash: Dash) -> None:
    """Search by task id and by error text, a status filter, and paging older and
    newer with the total shown, all from the page's own form and links."""
    by, driver = _by(), browser
    driver.get(dash.url + "/tasks")
    box = driver.find_element(by.ID, "search")
    box.send_keys("invoice")
    _follow(driver, by.CSS_SELECTOR, "form.filters button")
    found = driver.find_elements(by.CSS_SELECTOR, "#tasks tbody td:first-child .tid")
    assert [cell.text for cell in found] == [IDS.failed]
    driver.get(dash.url + "/tasks?q=approve")
    assert _text(driver, "#total") == "2 tasks"
    driver.get(dash.url + "/tasks?name=flaky")
    assert _text(driver, "#tasks tbody").startswith(IDS.retrying)
    driver.get(dash.url + "/tasks?until=2026-05-24T00:00:01Z")  # the batch's two, made first
    assert _text(driver, "#total") == "2 tasks"
    driver.get(dash.url + f"/tasks?batch={BATCH}&status=failed")
    assert _text(driver, "#total") == "1 task"
    dash.server.config.page_size = 4
    driver.get(dash.url + "/tasks?status=completed")
    total = _text(driver, "#total")
    first = _text(driver, "#tasks tbody")
    _follow(driver, by.ID, "older")
    assert _text(driver, "#total") == total
    assert _text(driver, "#tasks tbody") != first
    _follow(driver, by.ID, "newer")
    assert _text(driver, "#tasks tbody") == first
    assert _errors(driver) == []
    driver.get(dash.url + "/tasks?since=yesterday-ish")  # a 400 page saying which field
    assert "since" in _text(driver, "p.message")


def test_a_live_page_changes_without_a_reload(browser: Any, dash: Dash) -> None:
    """A change in the store shows on the open task page by itself (the document
    is the same one: a mark set in it survives); pausing says "paused"; a
    server that went away, "offline"."""
    by, driver = _by(), browser
    driver.get(dash.url + _task(IDS.failed))
    assert _text(driver, "#status") == "failed"
    # The page's htmx-config took: htmx evaluates no text as code, runs no
    # script in what it swaps in.
    assert driver.execute_script("return [htmx.config.allowEval, htmx.config.allowScriptTags]") == [
        False,
        False,
    ]
    driver.execute_script("document.documentElement.dataset.mark = 'same page'")
    assert admin(dash.app.store).retry_task(IDS.failed, dash.clock.now())
    _wait(driver, lambda d: _text(d, "#status") == "pending")
    assert driver.execute_script("return document.documentElement.dataset.mark") == "same page"
    assert _text(driver, "#live-state") == "live"
    driver.find_element(by.ID, "live-state").click()
    assert _text(driver, "#live-state") == "paused"
    driver.find_element(by.ID, "live-state").click()
    assert _text(driver, "#live-state") == "live"
    assert _errors(driver) == []
    dash.server.shutdown()
    _wait(driver, lambda d: _text(d, "#live-state") == "offline")


def test_each_button_changes_the_store(browser: Any, dash: Dash) -> None:
    """Retry, Cancel (on a waiting task, through its confirmation), Send signal
    and Resolve, each pressed in the page, leave the store as the CLI's command
    would, and land back on the task's page (303)."""
    by, driver = _by(), browser
    driver.get(dash.url + _task(IDS.failed))
    _follow(driver, by.ID, "retry")
    assert dash.status(IDS.failed) == "pending"
    assert _text(driver, "#status") == "pending"
    driver.get(dash.url + _task(IDS.waiting_too))
    _follow(driver, by.ID, "cancel")  # to its confirmation, which says what it touches
    assert dash.status(IDS.waiting_too) == "waiting"
    assert _text(driver, "#confirm-count") == "1"
    _follow(driver, by.ID, "confirm")
    assert dash.status(IDS.waiting_too) == "cancelled"
    driver.get(dash.url + _task(IDS.waiting))
    driver.find_element(by.ID, "signal-name").send_keys("approval")
    driver.find_element(by.ID, "signal-payload").send_keys('{"by": "ops"}')
    _follow(driver, by.ID, "signal")
    assert dash.status(IDS.waiting) == "pending"
    signal = dash.app.store.get_signal(IDS.waiting, "approval")
    assert signal is not None
    assert signal.payload == '{"by": "ops"}' or '"ops"' in signal.payload
    driver.get(dash.url + _task(IDS.in_doubt))
    driver.find_element(by.CSS_SELECTOR, "form.resolve input[name=result]").send_keys('"charged"')
    _follow(driver, by.CSS_SELECTOR, "form.resolve button")
    (op,) = [o for o in admin(dash.app.store).list_operations() if o.key == "charge/card-4242"]
    assert (op.status, op.result) == ("completed", '"charged"')
    assert dash.status(IDS.in_doubt) == "pending"
    assert _errors(driver) == []


class _Attacker(http.server.BaseHTTPRequestHandler):
    """Another site: a page whose form posts to the dashboard, and which knows
    even the form secret (so only the Origin check stands in the way)."""

    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        """Quiet."""


def test_rebinding_and_cross_site_posts_are_refused(browser: Any, dash: Dash) -> None:
    """The dashboard at a rebound name (``evil.example`` resolving to 127.0.0.1)
    answers 421 and shows no data; a form on another site posting Retry with
    the right form secret is refused (403) and the task stays failed."""
    by, driver = _by(), browser
    port = dash.server.server_address[1]
    driver.get(f"http://{EVIL}:{port}/")
    assert "--allow-host" in _text(driver, "body")
    assert BATCH not in driver.page_source
    form = (
        f'<form method="post" action="{dash.url}/task/retry">'
        f'<input name="id" value="{escape(IDS.failed)}">'
        f'<input name="csrf" value="{dash.server.config.csrf}">'
        '<button id="go" type="submit">win a prize</button></form>'
    ).encode()
    _Attacker.page = form
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=attacker.serve_forever, daemon=True)
    thread.start()
    try:
        driver.get(f"http://localhost:{attacker.server_address[1]}/")
        _follow(driver, by.ID, "go")
        assert "cross-origin POST refused" in _text(driver, "body")
    finally:
        attacker.shutdown()
        attacker.server_close()
        thread.join()
    assert dash.status(IDS.failed) == "failed"


def test_a_phone_gets_the_page_at_its_width(browser: Any, dash: Dash) -> None:
    """At a phone's width the page is laid out that wide (no sideways scrolling
    of the page itself: wide tables scroll inside their own box)."""
    driver = browser
    driver.set_window_size(390, 844)
    try:
        for path in ("/", _task(IDS.failed), f"/batch?name={BATCH}"):
            driver.get(dash.url + path)
            width = driver.execute_script("return document.documentElement.scrollWidth")
            inner = driver.execute_script("return window.innerWidth")
            assert width <= inner, path
        driver.get(dash.url + _task(IDS.failed))
        _shot(driver, "phone-task")
        assert _errors(driver) == []
    finally:
        driver.set_window_size(1280, 900)


def _on_screen(driver: Any, selector: str) -> bool:
    """Something matches ``selector``, and all of it lies inside the window's width."""
    script = (
        "const w = window.innerWidth; const found = [...document.querySelectorAll(arguments[0])];"
        "return found.length > 0 && found.every(e => { const r = e.getBoundingClientRect();"
        " return r.left >= 0 && r.right <= w; });"
    )
    return bool(driver.execute_script(script, selector))


def test_the_resolve_form_and_the_created_column_are_on_screen(browser: Any, dash: Dash) -> None:
    """At 1400 px and on a 390 px phone, the in-doubt key's Resolve form (the
    operations page and its task's page) and every batch's created date lie
    within the window: no part of them is clipped or scrolled away."""
    driver = browser
    try:
        for width, height in ((1400, 900), (390, 844)):
            driver.set_window_size(width, height)
            for path in ("/ops?doubt=1", _task(IDS.in_doubt)):
                driver.get(dash.url + path)
                assert _on_screen(driver, "form.resolve, form.resolve button"), (width, path)
            driver.get(dash.url + "/")
            assert _on_screen(driver, '#batches td[data-label="created"]'), width
            assert _errors(driver) == []
    finally:
        driver.set_window_size(1280, 900)


@pytest.fixture
def cost_dash(tmp_path: Path, browser: Any) -> Iterator[tuple[Cairn, str]]:
    """The dashboard over the store of ``_notes_run``, and that store's URL."""
    app = cost_run(tmp_path / "notes.db")
    config = UIConfig(admin(app.store), FakeClock().now, poll_seconds=0.2)
    server = DashboardServer(("127.0.0.1", 0), config)
    thread = serve_in_thread(server)
    yield app, server.url
    browser.get("about:blank")
    browser.get_log("browser")
    server.shutdown()
    server.server_close()
    thread.join()
    app.close()


def _cost_row(driver: Any) -> list[str]:
    cells = driver.find_elements(_by().CSS_SELECTOR, "#costs tr.cost-line td")
    return [cell.text for cell in cells]


def test_the_cost_pages_show_what_cairn_cost_prints(
    browser: Any, cost_dash: tuple[Cairn, str]
) -> None:
    """After a real run that compacted (a summarizer model on its own server, a
    provider reporting cached input), the batch page shows the batch's line of
    ``cairn cost`` and its tasks' lines of ``cairn cost --batch``, and each
    task's page the line of ``cairn cost --task``: the same cells, printed by
    the command in a process of its own from the same store; the headline cards
    (gross saved, summarizer, net saved, cached input) say the same, and none
    of them is zero."""
    app, url = cost_dash
    driver = browser
    store = app.store_url
    by_batch = cairn_cost(store)
    driver.get(url + f"/batch?name={COST_BATCH}")
    shown = _cost_row(driver)
    assert shown == by_batch[COST_BATCH]
    by_column = dict(zip(COST_COLUMNS, shown, strict=True))
    gross, summarizer = by_column["gross saved $"], by_column["summarizer $"]
    net = by_column["net saved $"]
    assert float(gross) > float(summarizer) > 0
    assert float(net) > 0
    assert int(shown[4]) > 0  # cached input
    assert _text(driver, "#cost-gross") == f"${gross}"
    assert _text(driver, "#cost-summarizer") == f"${summarizer}"
    assert _text(driver, "#cost-net") == f"${net}"
    assert _text(driver, "#cost-cached") == shown[4]
    per_task = cairn_cost(store, "--batch", COST_BATCH)
    rows = driver.find_elements(_by().CSS_SELECTOR, "#costs tr.cost-task")
    listed = {row.text.split()[0]: row.text.split() for row in rows}
    assert listed == {k: v for k, v in per_task.items() if k != "total"}
    assert len(listed) == 2
    driver.execute_script("document.getElementById('cost').scrollIntoView()")
    _shot(driver, "batch-cost")
    for task_id in listed:
        driver.get(url + _task(task_id))
        assert _cost_row(driver) == cairn_cost(store, "--task", task_id)[task_id]
        assert float(_text(driver, "#cost-net").lstrip("$")) > 0
    assert _errors(driver) == []


def test_a_task_page_shows_what_its_fidelity_probes_cost(
    browser: Any, cost_dash: tuple[Cairn, str]
) -> None:
    """After ``cairn fidelity`` probed a compacted agent (the command, against a
    model server of this process), the agent's task page lists that run with
    the line ``cairn cost --task`` prints for its probe task, and links to it;
    the probe task's own page shows the same line."""
    app, url = cost_dash
    driver = browser
    with model_server(DocReader(docs=8)) as probes:
        env = {"OPENAI_BASE_URL": probes.base_url, "OPENAI_API_KEY": "unused"}
        said = cairn(
            "fidelity", READER, "--model", "gpt-4o-mini", "--store", app.store_url, env=env
        )
        assert probes.requests > 0
    (probe_id,) = re.findall(r"recorded as task (\S+)", said)
    expected = cairn_cost(app.store_url, "--task", probe_id)[probe_id]
    assert int(expected[1]) == probes.requests  # every probe call, counted at the server
    driver.get(url + _task(READER))
    rows = driver.find_elements(_by().CSS_SELECTOR, "#probe-costs tbody tr")
    assert [row.text.split() for row in rows] == [expected]
    driver.execute_script("document.getElementById('cost').scrollIntoView()")
    _shot(driver, "task-cost")
    _follow(driver, _by().CSS_SELECTOR, "#probe-costs tbody a")
    assert _text(driver, "h1") == f"Task {probe_id}"
    assert _cost_row(driver) == expected
    assert _errors(driver) == []
