"""What ``cairn cost`` says compaction saved, against what it really saved.

The same workload runs twice against the local model servers of
``tests/agent_server.py``, which count tokens more densely than cairn's
estimate does (as a real tokenizer differs from it): once compacted (with a
model summarizer on its own server), once never compacted. The measured saving
comes from the servers' own token accounting: the prompt tokens the
uncompacted run sent, less those the compacted run sent, less what its
summarizer's requests cost. ``cairn cost`` must report the gross and net saving
within 2% of that, per task and per batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context, TaskDef
from cairn.agent import LLMSummarizer, Price, PriceTable, user
from cairn.agent.simulate import SimulatedModelServer
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from tests.agent_server import Scripted, openai_client

TURNS = 60
INPUT, OUTPUT = 1.0, 4.0  # $ per million tokens, the agent's model and the summarizer's
PRICES = PriceTable({"agent": Price(INPUT, OUTPUT), "summ": Price(INPUT, OUTPUT)})
SEEDS = ({"seed": 1}, {"seed": 2})


class DenserTokens:
    """The servers' tokenizer: about 3 characters a token where cairn's estimate
    says 4, so a saving re-estimated by cairn would be a third off."""

    def count(self, text: str) -> int:
        return (len(text) + 2) // 3


def _summary(request: dict[str, Any]) -> dict[str, Any]:
    """A summarizer model: a ~150-token summary naming how much it read."""
    size = len(json.dumps(request["messages"]))
    return {"role": "assistant", "content": f"Goal: take notes ({size}).\n" + "- noted. " * 60}


def _workload(app: Cairn, agent: Any, summarizer: Any, threshold: int) -> TaskDef[..., int]:
    @app.task(name="notes")
    def notes(ctx: Context, seed: int) -> int:
        conv = ctx.conversation(
            "main",
            system="You take notes.",
            threshold=threshold,
            keep_tail=800,
            summarizer=summarizer,
            summary_tokens=400,
            prices=PRICES,
            client=agent,
        )
        for turn in range(TURNS):
            words = " ".join(f"w{seed}{turn}{i}" for i in range(40 + (turn * seed) % 50))
            conv.append(user(f"turn {turn}: {words}"))
            ctx.llm(conv, model="agent")
        return conv.stats.compactions

    return notes


def _run(path: Path, agent: SimulatedModelServer, summ: SimulatedModelServer | None) -> None:
    app = Cairn(f"sqlite:///{path}", clock=FakeClock())
    summarizer = None if summ is None else LLMSummarizer(openai_client(summ), model="summ")
    threshold = 3000 if summ is not None else 10**9
    task = _workload(app, openai_client(agent), summarizer, threshold)
    report = app.run_batch("notes", task, list(SEEDS), concurrency=1, progress=False)
    assert report.completed == len(SEEDS)
    app.close()


def _cost(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli_app, ["cost", *args, "--json", "--store", str(path)])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


def test_the_reported_saving_is_within_2_percent_of_the_measured_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gross saving (tokens and $), the summarizer's cost and the net saving that
    ``cairn cost`` reports, per batch and summed per task, are within 2% of the
    difference the servers measured between the compacted and the uncompacted run."""
    monkeypatch.delenv("CAIRN_STORE", raising=False)
    reply = Scripted(["Noted; I will keep that in mind for the rest of the work."])
    with (
        SimulatedModelServer(reply, counter=DenserTokens()) as plain,
        SimulatedModelServer(reply, counter=DenserTokens()) as agent,
        SimulatedModelServer(_summary, counter=DenserTokens()) as summ,
    ):
        _run(tmp_path / "plain.db", plain, None)
        _run(tmp_path / "compacted.db", agent, summ)
    assert agent.completion_tokens == plain.completion_tokens  # the same replies
    gross_tokens = plain.prompt_tokens - agent.prompt_tokens
    summarizer_cost = (summ.prompt_tokens * INPUT + summ.completion_tokens * OUTPUT) / 1e6
    gross_cost = gross_tokens * INPUT / 1e6
    net_cost = gross_cost - summarizer_cost
    assert summ.requests >= 4
    assert net_cost > 0
    batch = _cost(tmp_path / "compacted.db")["total"]
    tasks = _cost(tmp_path / "compacted.db", "--batch", "notes")["lines"]
    assert len(tasks) == len(SEEDS)
    assert sum(t["saved_tokens"] for t in tasks) == batch["saved_tokens"]
    assert sum(t["estimated_net_saved_cost"] for t in tasks) == pytest.approx(
        batch["estimated_net_saved_cost"], abs=1e-5
    )
    assert batch["saved_tokens"] == pytest.approx(gross_tokens, rel=0.02)
    assert batch["estimated_saved_cost"] == pytest.approx(gross_cost, rel=0.02)
    assert batch["estimated_summarizer_cost"] == pytest.approx(summarizer_cost, rel=0.02)
    assert batch["estimated_net_saved_cost"] == pytest.approx(net_cost, rel=0.02)
    assert batch["tokens_without_compaction"] == pytest.approx(plain.prompt_tokens, rel=0.02)


def test_a_saving_is_priced_at_the_cached_rate_when_the_call_read_a_cache() -> None:
    """PriceTable.saving: the input rate, or the cached-input rate when the call
    reported cached tokens (the saved tokens are the prompt's older part, which
    the cache would have held); an unknown model has no price."""
    table = PriceTable({"m": Price(2.0, 8.0, 0.5)})
    assert table.saving("m", 1_000_000, cached_tokens=0) == pytest.approx(2.0)
    assert table.saving("m", 1_000_000, cached_tokens=10) == pytest.approx(0.5)
    assert table.saving("m", -5, cached_tokens=0) == 0.0
    assert table.saving("unknown", 1_000, cached_tokens=0) is None
