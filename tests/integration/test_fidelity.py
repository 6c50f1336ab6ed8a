"""``cairn fidelity`` as a quality signal, on real stores and a model server of our own.

The agent reads documents with one of two tools; a rule said once at the start
(``RULE``) names the one to use, and the model (``RuleReader``) follows the rule
only while it is in its context. Two summarizers fold the same history: one
keeps the rule, one drops it. So after a compaction the lossy summary really
changes every decision, and the faithful one changes none. The model is
deterministic at temperature 0 (what cairn fidelity sends) and noisy at
temperature 1, which shows the noise floor's band doing its work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn import Cairn, Context, TaskDef
from cairn.agent import EstimateCounter, fidelity, iter_history, providers, tool_result, user
from cairn.agent.fidelity import next_tool_call, same_tool
from cairn.agent.messages import text_of
from cairn.agent.summarize import SummaryRequest
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.store import open_store
from tests.agent_server import (
    FETCH_TOOL,
    READ_TOOL,
    RULE,
    SYSTEM,
    RuleReader,
    doc_text,
    model_server,
    openai_client,
)

DOCS = 30
TASK = "reader"


class RuleSummary:
    """Says which documents were read; keeps the rule only if ``keep``."""

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep

    def __call__(self, request: SummaryRequest) -> str:
        text = " ".join([request.previous or "", *(text_of(m) for m in request.messages)])
        latest = max((int(n) for n in re.findall(r"doc-(\d\d) says", text)), default=-1)
        parts = ["The user asked for every document to be read."]
        if latest >= 0:
            parts.append(f"Read up to doc-{latest:02d}: doc-{latest:02d} says what it says.")
        if self.keep and RULE in text:
            parts.append(RULE)
        return " ".join(parts)


def rule_task(app: Cairn, client: Any, summarizer: Any) -> TaskDef[..., Any]:
    """The reading agent; with ``stop_after`` it stops there and returns its
    handoff document (``archive`` as asked), else its final answer."""

    @app.task(name="reader")
    def reader(
        ctx: Context,
        goal: str,
        start_from: dict[str, Any] | None = None,
        stop_after: int | None = None,
        archive: str | None = None,
    ) -> Any:
        conv = ctx.conversation(
            "main",
            system=SYSTEM,
            threshold=1200,
            keep_tail=400,
            summarizer=summarizer,
            client=client,
            start_from=start_from,
            # As the fake server and fidelity() count (named no counter, the
            # conversation would count gpt-4o-mini's real tokens).
            counter=EstimateCounter(),
        )
        conv.append(user(goal))
        while True:
            reply = ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL, FETCH_TOOL])
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                number = int(call.args["name"].split("-")[1])
                text = ctx.step(f"{call.name} {call.args['name']}", doc_text, number)
                conv.append(tool_result(call.id, text))
            if stop_after is not None and number >= stop_after:
                return conv.handoff({"day": 1}, archive=archive)

    return reader


def _record(path: Path, *, keep: bool) -> None:
    with model_server(RuleReader(DOCS)) as server:
        app = Cairn(f"sqlite:///{path}", clock=FakeClock())
        task = rule_task(app, openai_client(server), RuleSummary(keep=keep))
        app.run(task, task_id=TASK, goal=f"Read every document. {RULE}")
        app.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two recorded stores, built once: the summary drops the rule, or keeps it."""
    root = tmp_path_factory.mktemp("fidelity")
    built = {}
    for name, keep in (("lossy", False), ("faithful", True)):
        built[name] = root / f"{name}.db"
        _record(built[name], keep=keep)
    return built


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner with a clean environment."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The model server cairn fidelity reaches through OPENAI_BASE_URL: noisy at
    any temperature but 0 (one call in ten takes the other tool)."""
    with model_server(RuleReader(DOCS, noise=0.1, seed=0)) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setattr(providers, "_defaults", {})
        yield running


def _fidelity(cli: CliRunner, store: Path, *args: str) -> dict[str, Any]:
    result: Result = cli.invoke(
        cli_app, ["fidelity", TASK, "--model", "m", "--json", *args, "--store", str(store)]
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


@pytest.mark.parametrize("temperature", ["0", "1"])
def test_a_summary_that_drops_the_deciding_fact_scores_below_the_noise_floor(
    cli: CliRunner, stores: dict[str, Path], server: Any, temperature: str
) -> None:
    """Every turn after a compaction is probed, three times (full, compacted,
    full again). At temperature 0 the model is deterministic: the full history
    agrees with itself every time (the noise floor is 100%); the summary that
    dropped the rule scores 0%, far below the band (a failure: at a probe
    where the floor shows no noise its answer differed, twice), and the one
    that kept it 100%, inside it. At temperature 1 one answer in ten is the other tool: the
    floor drops to about 80% with a band of its own, the faithful summary scores
    inside that band (it is noise, not loss) and the lossy one clearly below it
    (its whole interval under the band)."""
    lossy = _fidelity(cli, stores["lossy"], "--temperature", temperature)
    faithful = _fidelity(cli, stores["faithful"], "--temperature", temperature)
    print(f"\ntemperature {temperature}:")
    for name, report in (("lossy", lossy), ("faithful", faithful)):
        floor = report["baseline"]
        print(
            f"  {name}: {report['rate']:.1%} {report['ci95']} of {report['probes']} probes; "
            f"noise floor {floor['rate']:.1%} {floor['ci95']}; {report['verdict']}"
        )
        assert report["probes"] == report["candidates"] >= 20
        assert report["tools"] == "recorded"
    low = lossy["baseline"]["ci95"][0]
    assert lossy["ci95"][1] < low
    if temperature == "0":
        # The floor shows no noise: the first disagreement, repeated, is a failure.
        first = lossy["disagreements"][0]["position"]
        assert lossy["verdict"] == f"failure: a critical loss at probe {first}"
        assert lossy["critical"] == first
    else:
        assert lossy["verdict"] == "below the noise floor"
        assert lossy["critical"] is None
    assert faithful["verdict"] == "within the noise floor"
    assert faithful["ci95"][1] >= faithful["baseline"]["ci95"][0]
    if temperature == "0":
        assert lossy["baseline"]["rate"] == faithful["baseline"]["rate"] == 1.0
        # Only the last turn agrees: with every document read, both answer in text.
        assert (lossy["agreements"], faithful["rate"]) == (1, 1.0)
    else:
        assert 0.6 < faithful["baseline"]["rate"] < 1.0
        assert all(body["temperature"] == 1.0 for body in server.bodies)


def test_a_cap_probes_a_stratified_sample_and_the_library_measures_the_same(
    stores: dict[str, Path],
) -> None:
    """With a cap under the number of decision points, a seeded sample of that
    size is probed (the same one for the same seed); the library call with a
    model as ``decide`` gives the CLI's verdicts."""
    opened = open_store(f"sqlite:///{stores['lossy']}")
    try:
        rows = list(iter_history(opened, TASK, "main"))
    finally:
        opened.close()
    with model_server(RuleReader(DOCS)) as running:
        decide = next_tool_call(openai_client(running), model="m")
        first = fidelity(rows, None, decide, max_probes=8, seed=3, same=same_tool)
        again = fidelity(rows, None, decide, max_probes=8, seed=3, same=same_tool)
        # Three asks per probe, and one more to confirm the first disagreement.
        assert running.requests == 2 * (3 * 8 + 1)
    assert first.probes == 8 < first.candidates
    assert first.positions == again.positions
    assert first.rate == 0.0
    assert first.verdict == f"failure: a critical loss at probe {first.positions[0]}"


# -- handoff: Day 2 against Day 1's archive followed by Day 2 -----------------------------
DAY1_STOP = 14


def _day1(path: Path, server: Any, archive: str, blobs: Path | None = None) -> dict[str, Any]:
    """Day 1 reads up to doc DAY1_STOP (compacting, keeping the rule) and hands off."""
    app = Cairn(
        f"sqlite:///{path}", clock=FakeClock(), blobs=None if blobs is None else blobs.as_uri()
    )
    task = rule_task(app, openai_client(server), RuleSummary(keep=True))
    doc: dict[str, Any] = app.run(
        task,
        task_id="day1",
        goal=f"Read every document. {RULE}",
        stop_after=DAY1_STOP,
        archive=archive,
    )
    app.close()
    return doc


def _day2(path: Path, server: Any, doc: dict[str, Any], blobs: Path | None = None) -> None:
    """Day 2, on another store, goes on from the handoff in batch ``day2``."""
    app = Cairn(
        f"sqlite:///{path}", clock=FakeClock(), blobs=None if blobs is None else blobs.as_uri()
    )
    task = rule_task(app, openai_client(server), RuleSummary(keep=True))
    report = app.run_batch(
        "day2",
        task,
        [{"goal": "Go on.", "start_from": doc}],
        key=lambda _: "reader",
        progress=False,
    )
    assert report.completed == 1
    app.close()


def _day2_report(cli: CliRunner, store: Path, *args: str) -> dict[str, Any]:
    result = cli.invoke(
        cli_app,
        ["fidelity", "day2/reader", "--model", "m", "--json", *args, "--store", str(store)],
    )
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def test_a_handed_off_conversation_is_compared_against_day_1s_archive_plus_day_2(
    cli: CliRunner, tmp_path: Path, server: Any
) -> None:
    """Day 1 hands off with its archive inline; Day 2 runs on another store and
    keeps the archive (in its own blob store; its first row names the blob).
    cairn fidelity on Day 2's store compares each Day 2 decision with the one
    made on Day 1's archive followed by Day 2's messages: faithful, so within the
    noise floor (8 of its decision points, sampled). Compared with Day 2's own
    rows alone (no archive), where the "full" history lacks the rule the summary
    kept, it would score near 0: the defect this fixes."""
    doc = _day1(tmp_path / "day1.db", server, "inline")
    assert len(doc["archive"]["rows"]) > 2 * DAY1_STOP
    _day2(tmp_path / "day2.db", server, doc)
    opened = open_store(f"sqlite:///{tmp_path / 'day2.db'}")
    try:
        rows = list(iter_history(opened, "day2/reader", "main", carried=False))
    finally:
        opened.close()
    origin = rows[0].meta["handoff"]  # type: ignore[index]
    assert origin["archive"]["blob"].startswith("!blob:")
    aware = _day2_report(cli, tmp_path / "day2.db", "--max-probes", "8")
    assert aware["handoff"]["task_id"] == "day1"
    assert aware["rate"] == aware["baseline"]["rate"] == 1.0
    assert aware["verdict"] == "within the noise floor"
    decide = next_tool_call(openai_client(server), model="m")
    unaware = fidelity(rows, None, decide, max_probes=8, same=same_tool)
    assert unaware.rate < 0.2
    print(f"\nDay 2: aware {aware['rate']:.1%}, without the archive {unaware.rate:.1%}")


def test_the_archive_blob_travels_with_cairn_export(
    cli: CliRunner, tmp_path: Path, server: Any
) -> None:
    """Day 1 hands off with its archive in a blob store it shares with Day 2;
    `cairn export` of Day 2's batch carries that blob (its reference is inside a
    message's meta), `cairn import` puts it in a third store's own blob store, and
    cairn fidelity there reads Day 1's archive from it; `cairn gc` keeps it."""
    shared = tmp_path / "shared-blobs"
    doc = _day1(tmp_path / "day1.db", server, "blob", blobs=shared)
    assert doc["archive"]["blob"].startswith("!blob:")
    _day2(tmp_path / "day2.db", server, doc, blobs=shared)
    export = tmp_path / "day2.cairn"
    moved = cli.invoke(
        cli_app,
        [
            "export",
            str(export),
            "--batch",
            "day2",
            "--store",
            str(tmp_path / "day2.db"),
            "--blobs",
            shared.as_uri(),
        ],
    )
    assert moved.exit_code == 0, moved.output
    assert "1 blob(s)" in moved.output
    third = tmp_path / "third.db"
    landed = cli.invoke(cli_app, ["import", str(export), "--store", str(third)])
    assert landed.exit_code == 0, landed.output
    kept = cli.invoke(cli_app, ["gc", "--grace", "0m", "--store", str(third)])
    assert kept.exit_code == 0, kept.output
    assert "kept 1 referenced" in kept.output
    report = _day2_report(cli, third, "--max-probes", "4")
    assert report["handoff"]["task_id"] == "day1"
    assert report["rate"] == 1.0
