"""The dashboard's operator actions against the real server on 127.0.0.1: bulk
retry, cancel and rerun on a filter (an error group among them), each behind a
confirmation that says how many tasks it touches and guarded by the form
secret; a task's rerun, lineage and diff; and the audit trail, written under
the token's name, without the token."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest

from cairn import Budget, Cairn, Context
from cairn.admin.audit import audit_page
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.agent_server import openai_client

BATCH = "reviews"
TOKEN = "night-shift-token-0123456789"
FIXED = {"on": False}


@dataclass
class Dash:
    app: Cairn
    server: DashboardServer

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.server_address[1], timeout=10)
        headers = {
            "Host": self.host,
            "Origin": f"http://{self.host}",
            "Authorization": f"Bearer {TOKEN}",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        try:
            conn.request(method, path, urlencode(form) if form is not None else None, headers)
            got = conn.getresponse()
            return got.status, got.getheader("Location") or "", got.read().decode()
        finally:
            conn.close()

    def confirmed(self, path: str, fields: dict[str, str]) -> tuple[int, str, str]:
        """Post a confirmation page's form: its fields, the secret, ``confirmed``."""
        return self.request(
            "POST", path, {**fields, "csrf": self.server.config.csrf, "confirmed": "1"}
        )

    def statuses(self) -> dict[str, str]:
        return {t.id: t.status for t in admin(self.app.store).list_tasks()}


@pytest.fixture
def dash(app: Cairn, clock: FakeClock) -> Iterator[Dash]:
    """A batch of six reviews: two fail with ValueError, one with KeyError, three
    complete; the dashboard with a token named ``night-shift``."""
    FIXED["on"] = False

    @app.task(name="review")
    def review(ctx: Context, n: int) -> int:
        page = ctx.step("fetch", lambda: n * 10)

        def analyze() -> int:
            if not FIXED["on"] and n in (1, 2):
                raise ValueError(f"bad {n}")
            if not FIXED["on"] and n == 3:
                raise KeyError(n)
            return page + (1 if FIXED["on"] else 0)

        return int(ctx.step("analyze", analyze))

    app.run_batch(BATCH, review, [{"n": n} for n in range(6)], progress=False)
    config = UIConfig(admin(app.store), clock.now, token=TOKEN, actor_name="night-shift")
    server = DashboardServer(("127.0.0.1", 0), config)
    thread = serve_in_thread(server)
    try:
        yield Dash(app, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_bulk_retry_of_an_error_group_says_how_many_then_does_it(dash: Dash) -> None:
    """The batch page links each failure group to the task list filtered by it;
    the bulk Retry's confirmation counts the two ValueError tasks (not the
    KeyError one), and its form, posted, retries exactly those: one audit entry
    as ui:night-shift with the count, and no token anywhere in the trail."""
    status, _, page = dash.request("GET", f"/batch?name={BATCH}")
    assert status == 200
    assert "error=builtins.ValueError" in page
    query = {"batch": BATCH, "status": "failed", "error": "builtins.ValueError"}
    status, _, listing = dash.request("GET", "/tasks?" + urlencode(query))
    assert 'id="total">2 tasks' in listing
    status, _, confirm = dash.request("GET", "/confirm?" + urlencode({**query, "action": "retry"}))
    assert status == 200
    assert 'id="confirm-count">2<' in confirm
    status, where, _ = dash.confirmed("/bulk", {**query, "action": "retry"})
    assert status == 303
    assert where.startswith("/tasks?")
    statuses = dash.statuses()
    assert [statuses[f"{BATCH}/n={n}"] for n in (1, 2, 3)] == ["pending", "pending", "failed"]
    (entry,) = audit_page(admin(dash.app.store)).rows
    assert (entry.actor, entry.action, entry.count) == ("ui:night-shift", "retry", 2)
    assert entry.target == f"batch={BATCH} status=failed error=builtins.ValueError"
    assert TOKEN not in f"{entry}"


def test_a_bulk_action_needs_the_confirmation_and_the_form_secret(dash: Dash) -> None:
    """A bulk cancel posted without ``confirmed`` (400) or without the form
    secret (403) changes nothing and writes nothing to the trail."""
    fields = {"batch": BATCH, "action": "cancel"}
    assert dash.request("POST", "/bulk", {**fields, "csrf": dash.server.config.csrf})[0] == 400
    assert dash.request("POST", "/bulk", {**fields, "confirmed": "1"})[0] == 403
    assert "pending" not in dash.statuses().values()
    assert "cancelled" not in dash.statuses().values()
    assert audit_page(admin(dash.app.store)).rows == []


def test_a_bulk_rerun_from_a_step_then_its_diff_and_lineage(dash: Dash) -> None:
    """Rerun from analyze for the batch's completed and failed tasks: the
    confirmation plans all six (the position, what runs again); posted, it
    forks them and answers with the batch's diff page; after they ran with
    the fixed code, the diff lists analyze changed for each, and a task's
    page shows both runs."""
    query = {"batch": BATCH, "action": "rerun", "from": "analyze"}
    status, _, confirm = dash.request("GET", "/confirm?" + urlencode(query))
    assert status == 200
    assert 'id="confirm-count">6<' in confirm
    assert "2 analyze" in confirm
    status, where, _ = dash.confirmed("/bulk", query)
    assert (status, where) == (303, f"/diff?batch={BATCH}")
    FIXED["on"] = True
    dash.app.run_batch(BATCH, dash.app.registered("review"), progress=False)
    status, _, diff = dash.request("GET", where)
    assert status == 200
    assert diff.count('class="diff-row"') == 6
    assert 'id="diff-results">6<' in diff
    status, _, task = dash.request("GET", "/task?id=" + f"{BATCH}%2Fn%3D0")
    assert 'id="runs"' in task
    assert "2 (now)" in task
    assert "ui:night-shift" in task  # who forked run 1


def test_a_task_rerun_from_its_page(dash: Dash) -> None:
    """A finished task's page offers a rerun from each of its entries; the
    confirmation says what runs again, and its form forks the task."""
    task_id = f"{BATCH}/n=4"
    status, _, page = dash.request("GET", "/task?id=" + f"{BATCH}%2Fn%3D4")
    assert 'id="rerun-seq"' in page
    status, _, confirm = dash.request(
        "GET", "/confirm?" + urlencode({"action": "rerun", "id": task_id, "seq": "2"})
    )
    assert 'id="confirm-count">1<' in confirm
    status, where, _ = dash.confirmed("/task/rerun", {"id": task_id, "seq": "2", "from": ""})
    assert (status, where) == (303, "/task?id=reviews%2Fn%3D4")
    task = dash.app.store.get_task(task_id)
    assert task is not None
    assert (task.status, task.run) == ("pending", 2)
    status, _, audit = dash.request("GET", "/audit")
    assert status == 200
    assert f"task {task_id}" in audit


def test_a_batchs_budget_is_raised_from_its_page_and_its_parked_tasks_go_on(
    app: Cairn, clock: FakeClock
) -> None:
    """A batch whose budget (in tokens) parked its task: its page has the raise
    form; posted without the form secret it is refused, with a cap that is not a
    number it says so; posted right, the budget is raised (one audit entry as
    ui:night-shift), the task is woken, and a run of the batch completes it."""
    with SimulatedModelServer() as model:
        client = openai_client(model)

        @app.task(name="ask")
        def ask(ctx: Context) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": "hi"}], model="gpt-4o", client=client
            )
            return str(answer.content)

        app.run_batch("capped", ask, [{}], progress=False, budget=Budget(tokens=10))
        config = UIConfig(admin(app.store), clock.now, token=TOKEN, actor_name="night-shift")
        server = DashboardServer(("127.0.0.1", 0), config)
        thread = serve_in_thread(server)
        try:
            dash = Dash(app, server)
            page = dash.request("GET", "/batch?name=capped")[2]
            form = {"batch": "capped", "tokens": "100000"}
            stale = dash.request("POST", "/batch/budget", form)
            bad = dash.request(
                "POST", "/batch/budget", {**form, "tokens": "lots", "csrf": config.csrf}
            )
            done = dash.request("POST", "/batch/budget", {**form, "csrf": config.csrf})
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
        woken = dash.statuses()
        report = app.run_batch("capped", ask, [], progress=False)
    assert 'action="/batch/budget"' in page
    assert stale[0] == 403
    assert bad[0] == 400
    assert "the new tokens cap must be a number, not &#39;lots&#39;" in bad[2]
    assert (done[0], done[1]) == (303, "/batch?name=capped")
    assert woken == {"capped/": "pending"}
    assert report.counts == {"completed": 1}
    (entry,) = audit_page(admin(app.store)).rows
    assert (entry.actor, entry.action, entry.target, entry.count) == (
        "ui:night-shift", "budget", "batch:capped", 1,
    )  # fmt: skip
