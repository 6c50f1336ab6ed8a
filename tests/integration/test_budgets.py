"""Budgets around real model calls: the openai SDK against the simulated model
server on 127.0.0.1, whose own token counts are the measured truth.

A batch budget below what the batch needs parks its tasks (waiting, not
failed) with no call started past it, alerts once, and finishes after a raise
with a spend equal to the server's tokens at the price table's prices. A
task's budget holds its children's calls too, and the calls of failed attempts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

from cairn import Budget, Cairn, ConfigurationError, Context, Retry
from cairn.admin.budgets import budget_scope, budget_view, raise_budget
from cairn.agent import Price, PriceTable
from cairn.agent.simulate import SimulatedModelServer
from cairn.budgets import nanos_to_usd
from cairn.cli import app as cli_app
from cairn.observe.notifiers import SlackNotifier, WebhookNotifier
from cairn.observe.stalls import StallWatcher
from cairn.store import admin
from tests.servers import WebhookServer

MODEL = "m-priced"
# Dollars per million tokens: big enough that each call costs a visible amount.
PRICES = PriceTable({MODEL: Price(input=1000.0, output=3000.0)})


def reply(request: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "word " * 20}


def server_cost(server: SimulatedModelServer) -> float:
    """What the server's own token counts cost at ``PRICES``."""
    price = PRICES.price_of(MODEL)
    assert price is not None
    return (server.prompt_tokens * price.input + server.completion_tokens * price.output) / 1e6


def make_app(tmp_path: Path, server: SimulatedModelServer) -> tuple[Cairn, Any]:
    app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}")
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-unused", max_retries=0)

    @app.task
    def ask(ctx: Context, n: int) -> str:
        answer = ctx.llm_call(
            [{"role": "user", "content": f"question {n}"}], model=MODEL, client=client,
            max_tokens=40, prices=PRICES,
        )  # fmt: skip
        return str(answer.content)

    return app, ask


def test_bad_budgets_are_refused() -> None:
    """A budget with no cap, a cap that is not positive, or a warning share
    outside (0, 1] raises ConfigurationError naming what is wrong."""
    with pytest.raises(ConfigurationError, match="give usd=, tokens= or both"):
        Budget()
    with pytest.raises(ConfigurationError, match="usd must be positive"):
        Budget(usd=0)
    with pytest.raises(ConfigurationError, match="tokens must be a whole number"):
        Budget(tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="warn"):
        Budget(usd=1, warn=1.5)


def test_a_batch_over_budget_parks_alerts_once_and_finishes_after_a_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """10 calls at about $0.14 each against Budget(usd=0.5): the batch stops
    with every unfinished task waiting (none failed), the server got no request
    past the budget (its measured cost is within it), the "reached" alert is
    logged once; after a raise the parked tasks go on, and the batch's spend
    equals the server-measured cost within 1%."""
    caplog.set_level(logging.WARNING, logger="cairn.budget")
    with SimulatedModelServer(reply) as server:
        app, ask = make_app(tmp_path, server)
        items = [{"n": n} for n in range(10)]
        with app:
            first = app.run_batch("b", ask, items, concurrency=3, progress=False,
                                  budget=Budget(usd=0.5))  # fmt: skip
            parked = budget_view(admin(app.store), budget_scope("b"))
            before = server.requests
            assert server_cost(server) <= 0.5
            raised = raise_budget(admin(app.store), budget_scope("b"), app.clock.now(), usd=5.0)
            second = app.run_batch("b", ask, [], concurrency=3, progress=False)
            after = budget_view(admin(app.store), budget_scope("b"))
    assert first.counts.get("failed", 0) == 0
    assert first.counts["waiting"] == 10 - before
    assert parked is not None
    assert parked.status == "parked"
    assert len(parked.parked) == 10 - before
    assert sorted(raised.woken) == sorted(parked.parked)
    reached = [r for r in caplog.records if "reached" in r.getMessage()]
    assert len(reached) == 1
    assert second.counts == {"completed": 10}
    assert second.ran == 10 - before
    assert server.requests == 10
    assert after is not None
    assert after.spent_usd == pytest.approx(server_cost(server), rel=0.01)
    assert after.status == "ok"


def test_a_task_budget_holds_its_childrens_calls(tmp_path: Path) -> None:
    """A parent with Budget(tokens=90) spawns three children that each make one
    call (about 36 tokens used, 48 reserved: its prompt plus max_tokens=40): two
    go, the third would pass the parent's budget and parks, and the parent's
    spend is the server's count of the two."""
    with SimulatedModelServer(reply) as server:
        app, ask = make_app(tmp_path, server)

        @app.task(budget=Budget(tokens=90))
        def parent(ctx: Context) -> list[str]:
            kids = [ctx.spawn(ask, key=f"k{n}", n=n) for n in range(3)]
            return list(ctx.join(*kids))

        with app:
            report = app.run_batch("p", parent, [{}], concurrency=1, progress=False)
            view = budget_view(admin(app.store), budget_scope(task_id="p/"))
            statuses = sorted(t.status for t in admin(app.store).list_tasks(batch="p"))
    assert server.requests == 2
    assert report.counts == {"completed": 2, "waiting": 2}
    assert statuses == ["completed", "completed", "waiting", "waiting"]
    assert view is not None
    assert view.spent_tokens == server.prompt_tokens + server.completion_tokens


def test_failed_attempts_spend_counts_and_errors_cost_nothing(tmp_path: Path) -> None:
    """A call answered 500 (billed nothing by the server) and retried, and a
    task attempt that fails after its call: the budget's spend is exactly the
    server-measured cost of the calls answered."""
    with SimulatedModelServer(reply) as server:
        app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", task_retry=Retry(initial_delay=0))
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-unused", max_retries=0)
        failures = [1]

        @app.task
        def flaky(ctx: Context) -> str:
            for n in range(2):
                ctx.llm_call(
                    [{"role": "user", "content": f"q{n}"}], model=MODEL, client=client,
                    max_tokens=40, prices=PRICES, retry=Retry(initial_delay=0),
                )  # fmt: skip
                if failures:
                    failures.pop()
                    raise RuntimeError("the attempt fails after its first call")
            return "ok"

        with app:
            server.fail_next(1, 500)
            report = app.run_batch("f", flaky, [{}], progress=False, budget=Budget(usd=10))
            view = budget_view(admin(app.store), budget_scope("f"))
    assert report.counts == {"completed": 1}
    assert server.requests == 3
    assert view is not None
    assert nanos_to_usd(round(view.spent_usd * 1e9)) == pytest.approx(server_cost(server))


def test_the_warning_fires_once_when_spend_passes_its_share(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One call at a time under Budget(usd=5, warn=0.1): the warning is logged
    once, by the call whose settled spend first passes 10%, and names the
    budget and the spend; no "reached" alert, nothing parks."""
    caplog.set_level(logging.WARNING, logger="cairn.budget")
    with SimulatedModelServer(reply) as server:
        app, ask = make_app(tmp_path, server)
        with app:
            report = app.run_batch(
                "w", ask, [{"n": n} for n in range(10)], concurrency=1, progress=False,
                budget=Budget(usd=5, warn=0.1),
            )  # fmt: skip
    warned = [r.getMessage() for r in caplog.records if "passed 10%" in r.getMessage()]
    assert report.counts == {"completed": 10}
    assert len(warned) == 1
    assert warned[0].startswith("budget 'batch:w' passed 10% of its cap: $0.")
    assert not [r for r in caplog.records if "reached" in r.getMessage()]


def test_cairn_budget_shows_raises_and_refuses_bad_input(tmp_path: Path) -> None:
    """``cairn budget``: the budget as JSON; --raise sets the cap and says how
    many parked tasks it woke; a bad --raise, a batch with no budget, and a
    batch and a task at once are each refused with one line saying what to do."""
    url = f"sqlite:///{tmp_path / 'cairn.db'}"
    with SimulatedModelServer(reply) as server:
        app, ask = make_app(tmp_path, server)
        with app:
            app.run_batch("b", ask, [{"n": 0}], progress=False, budget=Budget(tokens=10))
    runner = CliRunner()
    shown = runner.invoke(cli_app, ["budget", "b", "--json", f"--store={url}"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["parked"] == ["b/n=0"]
    raised = runner.invoke(cli_app, ["budget", "b", "--raise", "tokens=1000", f"--store={url}"])
    assert raised.exit_code == 0, raised.output
    assert "raised batch:b to tokens=1000; woke 1 parked task(s)" in raised.stdout
    for arguments, says in [
        (["budget", "b", "--raise", "dollars=3"], "--raise takes usd=AMOUNT or tokens=COUNT"),
        (["budget", "b", "--raise", "usd=-1"], "the new usd cap must be positive"),
        (["budget", "nope"], "batch:nope has no budget; declare one"),
        (["budget", "b", "--task", "t"], "name a batch (cairn budget BATCH) or a task"),
    ]:
        result = runner.invoke(cli_app, [*arguments, f"--store={url}"])
        assert result.exit_code == 2
        assert says in " ".join(result.output.split())
        assert "Traceback" not in result.output


def test_cairn_watch_posts_each_budget_alert_once_until_a_raise(tmp_path: Path) -> None:
    """A batch whose budget refused a call: the watcher posts its "reached"
    alert to the webhook once (a second check posts nothing), with the budget's
    fields; after a raise and a second refusal, the new "reached" is posted once."""
    with SimulatedModelServer(reply) as server, WebhookServer() as hook:
        app, ask = make_app(tmp_path, server)
        with app:
            app.run_batch("b", ask, [{"n": 0}], progress=False, budget=Budget(tokens=10))
            watcher = StallWatcher(app, [WebhookNotifier(hook.url)])
            first = watcher.check()
            again = watcher.check()
            raise_budget(admin(app.store), budget_scope("b"), app.clock.now(), tokens=20)
            app.run_batch("b", ask, [], progress=False)
            after = watcher.check()
        posts = [post.json() for post in hook.delivered]
    assert first.budgets == ["budget/batch:b/reached-0"]
    assert again.budgets == []
    assert after.budgets == ["budget/batch:b/reached-1"]
    assert [(p["kind"], p["alert"], p["budget"]) for p in posts] == [
        ("budget", "reached", "batch:b"),
        ("budget", "reached", "batch:b"),
    ]
    assert posts[0]["tokens"] == 10
    assert posts[0]["parked"] == 1
    assert "cairn budget b --raise" in posts[0]["text"]


def test_a_task_budget_alert_names_the_task_by_its_key_as_given(tmp_path: Path) -> None:
    """A task budget on a task whose arguments cairn hashed into its id (a slash
    and a space) refuses a call: its alert's text and headline name the task by
    its arguments as given, its id after them; the ``budget`` field and the
    raise command keep the id."""
    with SimulatedModelServer(reply) as server, WebhookServer() as chat:
        app, _ = make_app(tmp_path, server)
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-unused", max_retries=0)

        @app.task(budget=Budget(tokens=10))
        def fetch(ctx: Context, url: str) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": f"read {url}"}], model=MODEL, client=client,
                max_tokens=40, prices=PRICES,
            )  # fmt: skip
            return str(answer.content)

        with app:
            report = app.run_batch("t", fetch, [{"url": "a b/c"}], progress=False)
            (task,) = admin(app.store).list_tasks(batch="t")
            watcher = StallWatcher(app, [SlackNotifier(chat.url)])
            assert watcher.check().budgets == [f"budget/task:{task.id}/reached-0"]
        (post,) = [post.json() for post in chat.delivered]
    assert report.counts == {"waiting": 1}
    assert "/sha256:" in task.id
    label = f"url=a b/c ({task.id})"
    assert post["blocks"][0]["text"]["text"] == f"Budget reached: task:{label}"
    assert post["text"].startswith(f"cairn: budget task:{label} reached")
    assert f"cairn budget --task {task.id} --raise" in post["text"]
