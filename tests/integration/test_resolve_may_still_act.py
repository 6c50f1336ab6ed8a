"""Settling a key whose claimant may still act needs a confirmation.

A task claims a key and stops there (an injected crash right after the claim,
in this very process, so its process still exists); the clock then moves past
its lease and grace, so the key is in doubt. ``cairn ops resolve --retry``
warns that the claimant may still wake and send, changes nothing and exits 1;
``--yes`` settles it. The dashboard's Resolve answers with the same warning and
a form to go on, and settles it only from that form. The real CLI (Typer's
runner) and the real dashboard server on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import admin
from cairn.testing import Fault, FaultPlan, InjectedCrash
from cairn.ui.server import DashboardServer, UIConfig, serve_in_thread
from tests.integration.test_ui_operator import TOKEN, Dash

KEY = "pay/o-1"


@pytest.fixture
def claimed(app: Cairn, clock: FakeClock) -> Cairn:
    """The key claimed by a task whose process (this one) still exists, its lease
    lapsed two minutes ago by the clock."""

    @app.task
    def pay(ctx: Context) -> str:
        return ctx.once(KEY, lambda key: "ch_1")

    FaultPlan([Fault("after_claim")]).install(app)
    with pytest.raises(InjectedCrash):
        app.run(pay, task_id="t")
    clock.advance(120)
    return app


def _status(app: Cairn) -> str:
    op = app.store.get_operation("", KEY)
    assert op is not None
    return op.status


def test_resolve_retry_warns_and_waits_for_yes(claimed: Cairn, db_path: Path) -> None:
    """(The CLI judges by the system clock, which is past the fake one: the lease
    lapsed by it too.) Without --yes: one error line saying the claimant's process still exists
    and may send, exit 1, the key unchanged. With --yes: released."""
    args = ["ops", "resolve", KEY, "--retry", "--store", str(db_path)]
    refused = CliRunner().invoke(cli_app, args)
    assert refused.exit_code == 1, refused.output
    assert refused.output.count("error: ") == 1
    assert "still exists on this host" in refused.output
    assert "add --yes" in refused.output
    assert _status(claimed) == "claimed"
    done = CliRunner().invoke(cli_app, [*args, "--yes"])
    assert done.exit_code == 0, done.output
    assert _status(claimed) == "released"


@pytest.fixture
def dash(claimed: Cairn, clock: FakeClock) -> Iterator[Dash]:
    config = UIConfig(admin(claimed.store), clock.now, token=TOKEN, actor_name="night-shift")
    server = DashboardServer(("127.0.0.1", 0), config)
    thread = serve_in_thread(server)
    try:
        yield Dash(claimed, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_dashboards_resolve_warns_and_goes_on_only_when_confirmed(dash: Dash) -> None:
    """Resolve as released: a 409 page with the warning and a form carrying
    confirmed=1; the key is unchanged until that form is posted."""
    form = {"csrf": dash.server.config.csrf, "scope": "", "key": KEY, "status": "released"}
    status, _, page = dash.request("POST", "/ops/resolve", form)
    assert status == 409, page
    assert "still exists on this host" in page
    assert 'name="confirmed" value="1"' in page
    assert "Call it again anyway" in page
    assert _status(dash.app) == "claimed"
    status, _where, page = dash.confirmed("/ops/resolve", form)
    assert status == 303, page
    assert _status(dash.app) == "released"
