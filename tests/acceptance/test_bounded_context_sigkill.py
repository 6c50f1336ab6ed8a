"""A summarizer whose answers are always cut off: 300 items, and the active context
stays under its hard bound; SIGKILLed part way, the run replays identically.

The agent (in a subprocess) appends one item per turn to a conversation and asks
its model after each, 300 times, with ``threshold=2000``, ``keep_tail=500`` and
``max_context=3000``. Its summarizer (``LLMSummarizer``) asks a model whose
every answer is longer than the cap it is sent, so the test's server cuts each
one off (finish reason ``length``) and no summary is ever acceptable. Both
models are simulated servers in this test process, which count every request
across the kills. Before this bound existed the prompt grew without limit (the
issue measured 61,912 tokens against a threshold of 8,000 at 300 items).

The run is SIGKILLed at one moment of a compaction that fell back, then run
again to the end: after its summary row was committed and before its entry
(``conv_returned``: the resumed run adopts the stored row), and after its
entry (``after_conv``). Either way the resumed run ends as the run never
killed: the same answer, the same rows (every fallback summary at the same
position), the same active context, and no request sent twice to either server.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cairn.agent.archive import iter_history, load_conversation
from cairn.agent.simulate import SimulatedModelServer
from cairn.agent.tokens import count_messages
from cairn.store import open_store
from tests.agent_server import Scripted, model_server
from tests.crashes import finish_child, start_child

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

ITEMS = 300
BOUND = 3000
TIMEOUT = 240

CHILD = """
import sys
import openai
from cairn import Cairn, Context
from cairn.agent import LLMSummarizer, user
from cairn.testing import set_fault_hook
from tests.crashes import sigkill_at

store, agent_url, summarizer_url, point, nth, marker, items, bound = sys.argv[1:9]
app = Cairn(f"sqlite:///{store}")
client = openai.OpenAI(base_url=agent_url, api_key="sk-test", max_retries=0)
summarizer = LLMSummarizer(
    openai.OpenAI(base_url=summarizer_url, api_key="sk-test", max_retries=0),
    model="gpt-4o-mini",
    max_tokens=200,
)
set_fault_hook(app, sigkill_at(point, int(nth), marker))


@app.task(name="items")
def items_task(ctx: Context, count: int) -> dict:
    conv = ctx.conversation(
        "main",
        system="You note each item.",
        threshold=2000,
        keep_tail=500,
        max_context=int(bound),
        summary_tokens=300,
        summarizer=summarizer,
        client=client,
    )
    for i in range(count):
        conv.append(user(f"item {i}: the order ord-{i:04d} ships to depot {i % 7}. " * 4))
        ctx.llm(conv, model="gpt-4o-mini")
    stats = conv.stats
    return {"compactions": stats.compactions, "fallbacks": stats.fallback_compactions}


with app:
    print(app.run(items_task, task_id="t", count=int(items)))
"""


def cut_off(request: dict[str, Any]) -> dict[str, Any]:
    """The summarizer's model: an answer far longer than any cap it is sent (the
    server cuts it there, finish reason ``length``)."""
    return {"role": "assistant", "content": "Goal: note items. " + "detail " * 2000}


def start(
    store: Path, agent: SimulatedModelServer, summarizer: SimulatedModelServer, point: str, nth: int
) -> subprocess.Popen[str]:
    marker = store.with_suffix(".killed")
    urls = [agent.base_url, summarizer.base_url]
    return start_child(
        CHILD, str(store), *urls, point, str(nth), str(marker), str(ITEMS), str(BOUND)
    )


def stored(store: Path) -> dict[str, Any]:
    """Every row, the active context, and the summary rows' meta."""
    opened = open_store(f"sqlite:///{store}")
    try:
        history = list(iter_history(opened, "t", "main"))
        view = load_conversation(opened, "t")
    finally:
        opened.close()
    assert view is not None
    return {
        "rows": [(r.idx, r.kind, r.message) for r in history],
        "summaries": [r.meta for r in history if r.kind == "summary"],
        "replies": [r.meta for r in history if r.message["role"] == "assistant"],
        "active": view.messages,
    }


def run_all(store: Path, point: str, nth: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The run (killed once at ``point``'s ``nth`` time, then run again when
    ``point`` is not ``-``): its answer, what it stored, and the servers' counts."""
    with (
        model_server(Scripted(["Noted."])) as agent,
        model_server(cut_off) as summarizer,
    ):
        code, out, err = finish_child(start(store, agent, summarizer, point, nth), TIMEOUT)
        if point != "-":
            assert code == -signal.SIGKILL, err
            code, out, err = finish_child(start(store, agent, summarizer, "-", 0), TIMEOUT)
        assert code == 0, err
        counts = {
            "agent": (agent.requests, agent.repeats),
            "summarizer": (summarizer.requests, summarizer.repeats),
            "largest prompt": max(count_messages(body["messages"]) for body in agent.bodies),
            "cut off": sum(1 for body in summarizer.bodies if body.get("max_tokens") == 200),
        }
    return out, stored(store), counts


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The run never killed (once for the module)."""
    return run_all(tmp_path_factory.mktemp("clean") / "clean.db", "-", 0)


def test_the_context_never_exceeds_its_bound_with_every_summary_cut_off(
    clean: tuple[str, dict[str, Any], dict[str, Any]],
) -> None:
    """300 items, every summary cut off: each of the 300 prompts the agent's
    server received is within the bound, every compaction that wrote a summary
    is the recorded extractive fallback (with the summarizer's refusal as its
    reason), and the summarizer was asked only a handful of times."""
    answer, rows, counts = clean
    assert counts["agent"] == (ITEMS, 0)
    assert counts["largest prompt"] <= BOUND
    assert all(meta["context_tokens"] <= BOUND for meta in rows["replies"])
    summaries = rows["summaries"]
    assert len(summaries) >= 5
    assert all(meta["fallback"] == "extractive" for meta in summaries)
    assert all(meta["tokens_after"] < BOUND for meta in summaries)
    # Each summarizer request came under the bound and was refused (a hold
    # follows), so at the bound the summarizer is held off: straight to the fallback.
    reasons = [meta["fallback_reason"] for meta in summaries]
    assert all(reason.startswith("the summarizer is held off after") for reason in reasons)
    summarizer_requests, repeats = counts["summarizer"]
    assert 1 <= summarizer_requests <= 6
    assert repeats == 0
    assert counts["cut off"] == summarizer_requests
    assert eval(answer) == {"compactions": len(summaries), "fallbacks": len(summaries)}  # noqa: S307 - our child's dict


@pytest.mark.parametrize("point", ["conv_returned", "after_conv"])
def test_killed_at_a_fallback_it_replays_identically(
    tmp_path: Path, clean: tuple[str, dict[str, Any], dict[str, Any]], point: str
) -> None:
    """SIGKILLed at ``point`` of the fifth compaction (the second fallback: the
    compactions go summarizer refused, refused, fallback, refused, fallback,
    then fallbacks alone) and run again: the answer, every row, the
    summaries' records and the active context are the clean run's, and
    neither server got a request twice."""
    answer, expected, counts = clean
    out, resumed, resumed_counts = run_all(tmp_path / "agent.db", point, 5)
    assert out == answer
    assert resumed["rows"] == expected["rows"]
    assert resumed["summaries"] == expected["summaries"]
    assert resumed["active"] == expected["active"]
    assert resumed_counts == counts
