"""How often fidelity's verdict fails a faithful summary: false alarms, per rule.

``cairn.agent.fidelity`` fails a compaction on one *critical loss*: the noise
floor shows no noise (the full history agreed with itself at every probe), and
at a probe the compacted context led to another decision, twice. This counts
how often that rule, and the older interval rule ("below the noise floor"),
call a faithful summary a loss, on the workloads the tests ship:

* reading: ``tests/agent_server.RuleReader`` reads 30 documents with the tool a
  rule names (tests/integration/test_fidelity.py, docs/agents.md's example),
  the summary keeps the rule;
* escalation: ``Escalator`` reads 30 documents and escalates doc-20 as its
  goal says (tests/integration/test_fidelity_critical.py), the summary keeps
  the instruction.

Each is probed as ``cairn fidelity`` probes (every decision point after a
compaction, three asks each, threshold 1,200, keep_tail 400, same tool =
agreement), by a model whose answer takes the other action with probability
``noise`` (0: temperature 0; 0.1: the tests' temperature 1), each run seeded
apart. A false alarm is a verdict that says loss on a summary that loses
nothing. The lossy summaries are probed too, as the rule's hit rate.

    .venv/bin/python -m bench.fidelity_alarms [--runs 200]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable
from typing import Any

from tests.agent_server import (
    FETCH,
    FETCH_TOOL,
    READ,
    READ_TOOL,
    RULE,
    SYSTEM,
    RuleReader,
    doc_text,
)
from tests.integration.test_fidelity import RuleSummary
from tests.integration.test_fidelity_critical import (
    DOCS,
    ESCALATE_TOOL,
    GOAL,
    Escalator,
    lossy_summary,
)

from cairn.agent import tool_result, user
from cairn.agent.fidelity import decision_of, fidelity, same_tool
from cairn.agent.messages import Message, system, text_of
from cairn.agent.summarize import SummaryRequest

Model = Callable[[dict[str, Any]], dict[str, Any]]
NOISES = (0.0, 0.02, 0.1)


class NoisyEscalator(Escalator):
    """``Escalator`` whose answer, with probability ``noise``, is the other
    action (escalate the latest document instead of reading on, or the reverse)."""

    def __init__(self, docs: int, *, noise: float, seed: int) -> None:
        super().__init__(docs)
        self.noise = noise
        self._rng = random.Random(seed)

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = super().__call__(request)
        calls = answer.get("tool_calls") or []
        if not calls or self.noise == 0 or self._rng.random() >= self.noise:
            return answer
        latest = self.next_doc(request["messages"]) - 1
        if calls[0]["function"]["name"] == "escalate":
            name, tool = f"doc-{latest + 1:02d}", READ
        else:
            name, tool = f"doc-{max(latest, 0):02d}", "escalate"
        function = {"name": tool, "arguments": json.dumps({"name": name})}
        return {**answer, "tool_calls": [{**calls[0], "function": function}]}


def faithful_escalation(request: SummaryRequest) -> str:
    """The lossy summary, with the instruction kept."""
    text = " ".join([request.previous or "", *(text_of(m) for m in request.messages)])
    kept = re.findall(r"escalate doc-\d\d once you have read it", text)
    return " ".join([lossy_summary(request), *kept[:1]])


def history(model: Model, goal: str, tools: list[dict[str, Any]]) -> list[Message]:
    """The agent's run at temperature 0, on its full context (the summaries
    tested here lose nothing it decides by, or are probed as lossy)."""
    messages: list[Message] = [system(SYSTEM), user(goal)]
    while True:
        reply = model({"messages": messages, "tools": tools, "temperature": 0})
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return messages
        for call in calls:
            name = json.loads(call["function"]["arguments"])["name"]
            if call["function"]["name"] == "escalate":
                text = f"escalation of {name} filed"
            else:
                text = doc_text(int(name.split("-")[1]))
            messages.append(tool_result(call["id"], text))


def verdicts(messages: list[Message], summarizer: Any, model: Model, noise: float) -> str:
    def decide(probe: list[Message], tools: Any = None) -> Any:
        temperature = 0 if noise == 0 else 1
        return decision_of(model({"messages": probe, "tools": tools, "temperature": temperature}))

    report = fidelity(messages, summarizer, decide, threshold=1200, keep_tail=400, same=same_tool)
    return report.verdict


def workloads(noise: float, seed: int) -> dict[str, tuple[list[Message], Any, Any, Model]]:
    reading = history(RuleReader(DOCS), f"Read every document. {RULE}", [READ_TOOL, FETCH_TOOL])
    escalation = history(Escalator(DOCS), GOAL, [READ_TOOL, ESCALATE_TOOL])
    assert any(FETCH in str(m) for m in reading)
    return {
        "reading": (
            reading,
            RuleSummary(keep=True),
            RuleSummary(keep=False),
            RuleReader(DOCS, noise=noise, seed=seed),
        ),
        "escalation": (
            escalation,
            faithful_escalation,
            lossy_summary,
            NoisyEscalator(DOCS, noise=noise, seed=seed),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    columns = ("failure", "below the floor")
    heads = [f"{side}: {c}" for side in ("faithful", "lossy") for c in columns]
    print("| workload | noise | runs | " + " | ".join(heads) + " |")
    print("|---|---|---|---|---|---|---|")
    for name in ("reading", "escalation"):
        for noise in NOISES:
            counts = {"ff": 0, "fb": 0, "lf": 0, "lb": 0}
            seeds = range(runs if noise else 1)
            for seed in seeds:
                messages, faithful, lossy, model = workloads(noise, seed)[name]
                for side, summarizer in (("f", faithful), ("l", lossy)):
                    verdict = verdicts(messages, summarizer, model, noise)
                    counts[side + "f"] += verdict.startswith("failure")
                    counts[side + "b"] += verdict == "below the noise floor"
            n = len(seeds)
            print(
                f"| {name} | {noise} | {n} | {counts['ff'] / n:.1%} | {counts['fb'] / n:.1%} "
                f"| {counts['lf'] / n:.1%} | {counts['lb'] / n:.1%} |"
            )


if __name__ == "__main__":
    main()
