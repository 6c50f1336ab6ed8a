"""One critical loss fails the fidelity verdict, with its probe named.

The agent reads 30 documents; its goal also says to escalate doc-20 once it is
read. The model (``Escalator``, deterministic at temperature 0) escalates
while that instruction is in its context, right after reading doc-20, and
reads on otherwise. The summarizer keeps which documents were read and drops
the instruction. So one decision point only, the one after doc-20, differs
between the full history and the compacted context: the score is all probes
but one, within the noise floor's band by the intervals alone (the case the
issue reported as 19 of 20 "within the noise floor"). The floor shows no
noise, and the compacted context's answer repeats when asked again: the
verdict is a failure naming that probe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, Context
from cairn.agent import providers, tool_result, user
from cairn.agent.messages import text_of
from cairn.agent.summarize import SummaryRequest
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from tests.agent_server import READ_TOOL, SYSTEM, DocReader, doc_text, model_server, openai_client

DOCS = 30
ESCALATED = 20
GOAL = f"Read every document, and escalate doc-{ESCALATED} once you have read it."
ESCALATE_TOOL = {
    "type": "function",
    "function": {
        "name": "escalate",
        "description": "Escalate one document to a person.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}
_INSTRUCTION = re.compile(r"escalate doc-(\d\d) once")


class Escalator(DocReader):
    """Reads the documents in order; escalates the one its context says to,
    right after reading it, unless the escalation is in its context already."""

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        text = " ".join(text_of(m) for m in messages)
        wanted = _INSTRUCTION.search(text)
        latest = self.next_doc(messages) - 1
        if wanted and int(wanted.group(1)) == latest and "escalation of" not in text:
            arguments = json.dumps({"name": f"doc-{latest:02d}"})
            function = {"name": "escalate", "arguments": arguments}
            call = {"id": f"esc_{latest:02d}", "type": "function", "function": function}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return super().__call__(request)


def lossy_summary(request: SummaryRequest) -> str:
    """Which documents were read (and any escalation made), but not the instruction."""
    text = " ".join([request.previous or "", *(text_of(m) for m in request.messages)])
    latest = max((int(n) for n in re.findall(r"doc-(\d\d) says", text)), default=-1)
    parts = ["The user asked for every document to be read."]
    if latest >= 0:
        parts.append(f"Read up to doc-{latest:02d}: doc-{latest:02d} says what it says.")
    parts += re.findall(r"escalation of doc-\d\d filed", text)
    return " ".join(parts)


def _record(path: Path) -> None:
    with model_server(Escalator(DOCS)) as server:
        app = Cairn(f"sqlite:///{path}", clock=FakeClock())
        client = openai_client(server)

        @app.task(name="reader")
        def reader(ctx: Context, goal: str) -> str:
            conv = ctx.conversation(
                "main",
                system=SYSTEM,
                threshold=1200,
                keep_tail=400,
                summarizer=lossy_summary,
                client=client,
            )
            conv.append(user(goal))
            while True:
                reply = ctx.llm(conv, model="gpt-4o-mini", tools=[READ_TOOL, ESCALATE_TOOL])
                if not reply.tool_calls:
                    return str(reply.content)
                for call in reply.tool_calls:
                    name = call.args["name"]
                    if call.name == "escalate":
                        text = ctx.step(
                            f"escalate {name}", lambda n=name: f"escalation of {n} filed"
                        )
                    else:
                        text = ctx.step(f"read {name}", doc_text, int(name.split("-")[1]))
                    conv.append(tool_result(call.id, text))

        assert app.run(reader, task_id="reader", goal=GOAL) == f"Read all {DOCS} documents. Done."
        app.close()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The model server cairn fidelity reaches through OPENAI_BASE_URL."""
    for name in ("CAIRN_STORE", "CAIRN_BLOBS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    with model_server(Escalator(DOCS)) as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setattr(providers, "_defaults", {})
        yield running


def test_a_summary_that_drops_one_deciding_instruction_fails_naming_the_probe(
    tmp_path: Path, server: Any
) -> None:
    """All probes but one agree, and by the intervals alone that is within the
    noise floor; but the floor shows no noise and the one disagreement
    (escalate doc-20 against read doc-21) repeats, so the verdict is a failure
    naming that probe, printed and in ``--json``; the confirmation cost one
    call more than the three asks per probe."""
    store = tmp_path / "reader.db"
    _record(store)
    cli = CliRunner()
    args = ["fidelity", "reader", "--model", "m", "--store", str(store)]
    listed = cli.invoke(cli_app, [*args, "--json"])
    assert listed.exit_code == 0, listed.output
    report = json.loads(listed.output)
    [loss] = report["disagreements"]
    assert "'escalate'" in loss["full"]
    assert "doc-20" in loss["full"]
    assert "'read_document'" in loss["compressed"]
    assert "doc-21" in loss["compressed"]
    assert report["agreements"] == report["probes"] - 1 >= 10
    assert report["baseline"]["rate"] == 1.0
    # The intervals overlap: the old rule called this "within the noise floor".
    assert report["ci95"][1] >= report["baseline"]["ci95"][0]
    assert report["critical"] == loss["position"]
    assert report["verdict"] == f"failure: a critical loss at probe {loss['position']}"
    assert server.requests == 3 * report["probes"] + 1
    printed = cli.invoke(cli_app, args)
    assert printed.exit_code == 0, printed.output
    assert f"verdict: failure: a critical loss at probe {loss['position']}" in printed.output
    assert "decided otherwise, and again when asked a second time" in printed.output
