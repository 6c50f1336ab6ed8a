"""``cairn conversation``, ``cairn cost`` and ``cairn fidelity`` on a real store.

One store per module: a batch ``agents`` of two reading agents, run against the
fake model server with compaction, copied for each test.
"""

from __future__ import annotations

import json
import re
import shutil
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn
from cairn.agent import providers
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import open_store
from tests.agent_server import DocReader, model_server, openai_client, reader_task

GOALS = ("Read every document.", "Read them all again.")
TASK = "agents/goal=Read every document."


def _build(path: Path) -> None:
    with model_server(DocReader(12)) as server:
        app = Cairn(f"sqlite:///{path}", clock=FakeClock())
        task = reader_task(app, openai_client(server), threshold=900, keep_tail=300)
        report = app.run_batch(
            "agents", task, [{"goal": g} for g in GOALS], concurrency=1, progress=False
        )
        assert report.completed == 2
        app.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store, built once for the module."""
    path = tmp_path_factory.mktemp("cli") / "agents.db"
    _build(path)
    return path


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    """A copy of the built store for one test."""
    copy = tmp_path / "agents.db"
    shutil.copy(built, copy)
    return copy


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner with a clean environment."""
    for name in ("CAIRN_STORE", "COLUMNS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def run(cli: CliRunner, store: Path, *args: str) -> Result:
    return cli.invoke(cli_app, [*args, "--store", str(store)])


def _rows(store: Path) -> list[Any]:
    opened = open_store(str(store))
    try:
        return opened.load_messages(TASK, "main", 0, 1000)
    finally:
        opened.close()


def _states(output: str) -> list[str]:
    """The state column of each table row."""
    return [
        m.group(1)
        for m in re.finditer(r"^\s*\d+\s+(archived|active|summary|old summary)\s", output, re.M)
    ]


def test_conversation_shows_the_active_context_and_with_all_the_archive(
    cli: CliRunner, store: Path
) -> None:
    """By default the table lists only the active rows (system, summary, tail);
    --all lists every row, archived ones marked; --jsonl exports one line per row;
    --handoff prints a handoff document, with --archive every row in it; an
    unknown conversation exits 2."""
    rows = _rows(store)
    active = run(cli, store, "conversation", TASK)
    assert active.exit_code == 0, active.output
    assert _states(active.output).count("archived") == 0
    assert _states(active.output).count("summary") == 1
    everything = run(cli, store, "conversation", TASK, "--all")
    assert everything.exit_code == 0, everything.output
    assert len(_states(everything.output)) == len(rows)
    assert _states(everything.output).count("archived") > 5
    jsonl = run(cli, store, "conversation", TASK, "--all", "--jsonl")
    lines = [json.loads(line) for line in jsonl.output.splitlines()]
    assert [line["idx"] for line in lines] == [r.idx for r in rows]
    handoff = json.loads(run(cli, store, "conversation", TASK, "--handoff").output)
    assert handoff["format"] == "cairn.handoff"
    assert handoff["summary"]
    assert "archive" not in handoff
    carried = json.loads(run(cli, store, "conversation", TASK, "--handoff", "--archive").output)
    assert [row["idx"] for row in carried["archive"]["rows"]] == [r.idx for r in rows]
    missing = run(cli, store, "conversation", TASK, "--name", "other")
    assert missing.exit_code == 2
    assert "no conversation 'other'" in missing.output


def test_conversation_json_has_summaries_with_what_they_cover_and_each_calls_cost(
    cli: CliRunner, store: Path
) -> None:
    """--json: each summary covers the rows after the one before it, up to its
    own ``covers_until``, and only the latest is active; each recorded call of the
    task has its tokens and cost, and they add up to the task's `cairn cost` line."""
    shown = json.loads(run(cli, store, "conversation", TASK, "--all", "--json").output)
    summaries = shown["summaries"]
    assert len(summaries) >= 2
    assert summaries[0]["covers"][0] == 0
    for before, after in pairwise(summaries):
        assert after["covers"][0] == before["covers"][1] + 1
    assert [s["active"] for s in summaries] == [False] * (len(summaries) - 1) + [True]
    by_row = {row["idx"]: row for row in shown["rows"]}
    for summary in summaries:
        assert by_row[summary["idx"]]["covers_until"] == summary["covers"][1]
    calls = shown["calls"]
    assert [c["kind"] for c in calls].count("llm") == 13
    assert [c["seq"] for c in calls] == sorted(c["seq"] for c in calls)
    line = json.loads(run(cli, store, "cost", "--task", TASK, "--json").output)["total"]
    assert sum(c["input_tokens"] for c in calls) == line["input_tokens"]
    assert sum(c["estimated_cost"] for c in calls) == pytest.approx(line["estimated_cost"])


def test_cost_per_batch_and_per_task_with_what_compaction_saved(
    cli: CliRunner, store: Path, tmp_path: Path
) -> None:
    """cairn cost sums the recorded calls: one line per batch by default, one per
    task with --batch, the same totals either way; compaction saved tokens, and
    --prices re-prices every call."""
    by_batch = json.loads(run(cli, store, "cost", "--json").output)
    per_task = json.loads(run(cli, store, "cost", "--batch", "agents", "--json").output)
    assert [line["label"] for line in by_batch["lines"]] == ["agents"]
    assert len(per_task["lines"]) == 2
    assert by_batch["total"] == per_task["total"]
    total = per_task["total"]
    assert total["calls"] == 2 * 13
    assert total["compactions"] >= 4
    assert total["saved_tokens"] > 0
    assert total["tokens_without_compaction"] == total["input_tokens"] + total["saved_tokens"]
    assert total["estimated_cost"] > 0
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gpt-4o-mini": {"input": 1000, "output": 0}}))
    repriced = json.loads(run(cli, store, "cost", "--prices", str(prices), "--json").output)
    assert repriced["total"]["estimated_cost"] == pytest.approx(total["input_tokens"] / 1000)
    table = run(cli, store, "cost", "--batch", "agents")
    assert table.exit_code == 0, table.output
    assert TASK in table.output
    assert "saved tokens" in table.output


def test_fidelity_agrees_when_the_compacted_context_keeps_what_decides(
    cli: CliRunner, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cairn fidelity asks the model (here the fake server, found through
    OPENAI_BASE_URL) for its next tool call with the full history, with the
    compacted context, and with the full history again, at turns that had a
    compacted context (a stratified sample of 4 of them here), offering the tools
    the recorded call had, at temperature 0; the reading model decides from the
    latest document read, which the tail keeps, so every probe agrees and the
    score is within the noise floor. The probes are a task of their own whose
    calls `cairn cost` counts."""
    with model_server(DocReader(12)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setattr(providers, "_defaults", {})
        result = run(cli, store, "fidelity", TASK, "--model", "m", "--probes", "4", "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert server.requests == 3 * report["probes"]
        bodies = server.bodies
    assert report["probes"] == 4
    assert report["candidates"] > 4
    assert report["rate"] == 1.0
    assert report["baseline"]["rate"] == 1.0
    assert report["verdict"] == "within the noise floor"
    assert report["tools"] == "recorded"
    assert report["disagreements"] == []
    assert all(body["temperature"] == 0 for body in bodies)
    assert all(
        [t["function"]["name"] for t in body["tools"]] == ["read_document"] for body in bodies
    )
    cost = json.loads(run(cli, store, "cost", "--task", report["probe_task"], "--json").output)
    assert cost["total"]["calls"] == 3 * report["probes"]
    assert cost["total"]["input_tokens"] > 0


def test_fidelity_of_a_conversation_never_compacted_is_an_error_not_100_percent(
    cli: CliRunner, tmp_path: Path
) -> None:
    """A conversation with no model turn after a compaction has nothing to
    measure: cairn fidelity says so and exits 1, and asks the model nothing."""
    path = tmp_path / "short.db"
    with model_server(DocReader(2)) as server:
        app = Cairn(f"sqlite:///{path}", clock=FakeClock())
        app.run(reader_task(app, openai_client(server)), task_id="short", goal="Read.")
        app.close()
        before = server.requests
        result = run(cli, path, "fidelity", "short", "--model", "m")
        assert server.requests == before
    assert result.exit_code == 1, result.output
    assert "nothing to probe" in result.output
    assert "100%" not in result.output
