"""The hard bound on the active context (``max_context``): the extractive fallback,
what ``cairn conversation`` shows of it, replay after a crash, and the one
case it cannot fold (a last message bigger than the bound).

The SIGKILL and 300-item case is tests/acceptance/test_bounded_context_sigkill.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.agent import EstimateCounter, tool_result, user
from cairn.agent.summarize import SummaryRequest
from cairn.agent.tokens import count_messages
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from tests.agent_server import Crash, Scripted, crash_at, model_server, openai_client, resume


def refusing(request: SummaryRequest) -> str:
    """A summarizer whose every summary is empty: always refused."""
    return ""


def _task(app: Cairn, client: Any, items: int, *, bound: int = 1200) -> Any:
    @app.task(name="notes")
    def notes(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation(
            "main",
            system="You note things.",
            threshold=800,
            keep_tail=200,
            max_context=bound,
            summary_tokens=150,
            summarizer=refusing,
            client=client,
            # The fake server counts with the estimate, and so does the conversation
            # (named no counter, it would count gpt-4o-mini's real tokens).
            counter=EstimateCounter(),
        )
        for i in range(items):
            conv.append(user(f"note {i}: the report report-{i}.pdf is due on day {i}. " * 3))
            ctx.llm(conv, model="gpt-4o-mini")
        return {"fallbacks": conv.stats.fallback_compactions, "tokens": conv.tokens}

    return notes


def test_over_the_bound_the_extractive_fallback_folds_the_head(tmp_path: Path) -> None:
    """Every summary refused: each prompt sent stays within the bound, the
    compactions that wrote a summary are fallbacks carrying their reason, and
    ``cairn conversation`` shows them (the count, the summary rows marked,
    each summary's reason in ``--json``)."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    app = Cairn(url)
    with model_server(Scripted(["Noted."])) as server:
        result = app.run(_task(app, openai_client(server), 60), task_id="t")
        largest = max(count_messages(body["messages"]) for body in server.bodies)
    app.close()
    assert largest <= 1200
    assert result["fallbacks"] >= 3
    runner = CliRunner()
    shown = runner.invoke(cli_app, ["conversation", "t", "--store", url, "--all"])
    assert shown.exit_code == 0, shown.output
    assert f"compactions by the fallback         {result['fallbacks']}" in shown.output
    assert "summary (fallback)" in shown.output
    listed = runner.invoke(cli_app, ["conversation", "t", "--store", url, "--all", "--json"])
    summaries = json.loads(listed.output)["summaries"]
    assert len(summaries) == result["fallbacks"]
    # Each refusal came under the bound and set a hold: at the bound, the
    # summarizer is held off and the fallback folds at once.
    reasons = [s["fallback_reason"] for s in summaries]
    assert all(r.startswith("the summarizer is held off after") for r in reasons), reasons


def test_a_run_crashed_after_a_fallback_replays_it(tmp_path: Path) -> None:
    """Crashed right after the second fallback's entry and resumed in another
    process: the resumed run sends only the calls not recorded, and ends with
    the rows of a run never crashed."""
    clean_url = f"sqlite:///{tmp_path / 'clean.db'}"
    with model_server(Scripted(["Noted."])) as server:
        clean = Cairn(clean_url)
        expected = clean.run(_task(clean, openai_client(server), 40), task_id="t")
        rows = [(r.idx, r.kind, r.content) for r in clean.store.load_messages("t", "main", 0, 999)]
        clean.close()
        calls = server.requests
    url = f"sqlite:///{tmp_path / 'crashed.db'}"
    clock = FakeClock()
    with model_server(Scripted(["Noted."])) as server:
        first = Cairn(url, clock=clock)
        from cairn.testing import set_fault_hook

        set_fault_hook(first, crash_at("after_conv", 2))
        with pytest.raises(Crash):
            first.run(_task(first, openai_client(server), 40), task_id="t")
        before = server.requests
        second = resume(url, clock)
        assert second.run(_task(second, openai_client(server), 40), task_id="t") == expected
        resumed = [
            (r.idx, r.kind, r.content) for r in second.store.load_messages("t", "main", 0, 999)
        ]
        second.close()
        first.close()
        assert (server.requests, server.repeats) == (calls, 0)
        assert 0 < before < calls
    assert resumed == rows


def test_a_last_message_bigger_than_the_bound_is_not_sent(app: Cairn) -> None:
    """A tool result that alone is over the bound: nothing can fold it away, so
    ``ctx.llm`` fails the task with one line that says what to change, and the
    model's server gets no request with it."""
    with model_server(Scripted(["Noted."])) as server:

        @app.task(name="huge", retry=None)
        def huge(ctx: Context) -> None:
            conv = ctx.conversation(
                "main", threshold=800, keep_tail=200, max_context=1200, client=openai_client(server)
            )
            conv.append(user("read the log"))
            ctx.llm(conv, model="gpt-4o-mini")
            conv.append(tool_result("call_1", "log line. " * 2000))
            ctx.llm(conv, model="gpt-4o-mini")

        with pytest.raises(Exception, match="over its bound of 1200 \\(max_context\\)") as failed:
            app.run(huge, task_id="h")
        assert server.requests == 1
    assert "raise max_context" in str(failed.value)
    assert app.store.get_task("h").status == "failed"  # type: ignore[union-attr]


def test_a_bound_at_or_under_the_threshold_is_refused(app: Cairn) -> None:
    """max_context must be above the threshold: said before anything is written."""

    @app.task(name="bad", retry=None)
    def bad(ctx: Context) -> None:
        ctx.conversation("main", threshold=800, keep_tail=200, max_context=800)

    with pytest.raises(Exception, match=r"max_context \(800\) must be above threshold \(800\)"):
        app.run(bad, task_id="b")


def test_fidelity_replays_the_fallback_as_the_live_conversation_made_it(tmp_path: Path) -> None:
    """fidelity's replay of compaction (``simulated_contexts``) over the same
    messages, summarizer and bound gives, at every model call, exactly the
    context the live conversation sent: the same refusals, holds and
    extractive fallbacks."""
    from cairn.agent.fidelity import simulated_contexts
    from cairn.agent.tokens import DEFAULT_COUNTER

    app = Cairn(f"sqlite:///{tmp_path / 'c.db'}")
    with model_server(Scripted(["Noted."])) as server:
        app.run(_task(app, openai_client(server), 60), task_id="t")
        sent = [body["messages"] for body in server.bodies]
    rows = app.store.load_messages("t", "main", 0, 999)
    app.close()
    messages = [json.loads(r.content) for r in rows if r.kind == "message"]
    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    contexts = simulated_contexts(
        messages,
        calls,
        refusing,
        threshold=800,
        keep_tail=200,
        counter=DEFAULT_COUNTER,
        summary_tokens=150,
        max_context=1200,
    )
    assert any("[Summary of the earlier part" in str(c) for c in contexts.values())
    assert [contexts[i] for i in calls] == sent


def test_a_kept_summary_that_would_leave_the_context_over_the_bound_gives_way(
    app: Cairn,
) -> None:
    """A summary within its budget but so big that, kept, the context would be
    over the bound: the fallback folds instead, saying why, and the call sent
    is within the bound."""

    def wordy(request: SummaryRequest) -> str:
        return "Goal: note things. " + "detail " * 600  # ~700 tokens, under summary_tokens

    with model_server(Scripted(["Noted."])) as server:

        @app.task(name="wordy")
        def talk(ctx: Context) -> list[str]:
            conv = ctx.conversation(
                "main",
                threshold=800,
                keep_tail=400,
                max_context=1000,
                summary_tokens=2000,
                summarizer=wordy,
                client=openai_client(server),
                counter=EstimateCounter(),  # as the fake server counts
            )
            for i in range(12):
                conv.append(user(f"note {i}: " + "the figures for the quarter. " * 8))
                ctx.llm(conv, model="gpt-4o-mini")
            return [
                str(r.meta["fallback_reason"])
                for r in conv.history()
                if r.kind == "summary" and r.meta
            ]

        reasons = app.run(talk, task_id="w")
        largest = max(count_messages(body["messages"]) for body in server.bodies)
    assert largest <= 1000
    assert reasons
    assert reasons[0].startswith("the summary left ")
    assert reasons[0].endswith("tokens, over the bound of 1000")
