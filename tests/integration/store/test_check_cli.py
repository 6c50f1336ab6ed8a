"""``cairn check MODULE:APP``: which in-flight tasks a code change reaches, and
what re-running them from there would repeat, found without calling anything.

Runs on SQLite and on PostgreSQL (``url``). The app is a module written into
the test's folder twice: ``review_v1`` as deployed, ``review_v2`` with the body
of its ``analyze`` step changed under the same name. Its model call goes
through the openai SDK to the fake model server on 127.0.0.1.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cairn.cli import app as cli_app
from cairn.testing import set_fault_hook
from tests.agent_server import Scripted, model_server, openai_client
from tests.crashes import Crash
from tests.crashes import url as url  # a fixture: pytest finds it by this name

APP = """
import os

from cairn import Cairn, Context
from cairn.agent import Price, PriceTable, user

app = Cairn(os.environ["CHECK_STORE"])
CALLS = []  # every user function this module runs, by name
CLIENT = None  # set by the test: an openai client on the fake model server
PRICES = PriceTable({"tiny": Price(input=1.0, output=2.0)})


def fetch(n):
    CALLS.append("fetch")
    return f"page {n}"


def analyze(page):
    CALLS.append("analyze")
    return ANALYZE_BODY


def apply(summary):
    CALLS.append("apply")
    return summary


@app.task(name="review")
def review(ctx: Context, n: int) -> str:
    page = ctx.step("fetch", fetch, n)
    verdict = ctx.step("analyze", analyze, page)
    reply = ctx.llm_call([user(verdict)], model="tiny", client=CLIENT, prices=PRICES)
    return ctx.step("apply", apply, reply.content)
"""
OLD_BODY = 'f"verdict on {page}"'
NEW_BODY = 'f"strict verdict on {page}"'
REACHED = [f"b/n={n}" for n in range(8)]  # past analyze when stopped
BEFORE = [f"b/n={n}" for n in range(8, 15)]  # stopped before analyze
PENDING = [f"b/n={n}" for n in range(15, 20)]  # never started


def write_module(folder: Path, name: str, body: str, step: str = "analyze") -> None:
    source = APP.replace("ANALYZE_BODY", body).replace('ctx.step("analyze"', f'ctx.step("{step}"')
    (folder / f"{name}.py").write_text(source)


def crash_before(step: str) -> Any:
    """A fault hook that stops the run just before the step named ``step``."""

    def hook(point: str, task_id: str, seq: int, name: str) -> None:
        if point == "before_step" and name == step:
            raise Crash(f"crash before {name}")

    return hook


@pytest.fixture
def modules(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Both versions of the app importable, 20 tasks in flight on the first one,
    and the model server that answered them (left running for the checks)."""
    write_module(tmp_path, "review_v1", OLD_BODY)
    write_module(tmp_path, "review_v2", NEW_BODY)
    write_module(tmp_path, "review_v3", OLD_BODY, step="assess")
    monkeypatch.setenv("CHECK_STORE", url)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded: dict[str, Any] = {}
    with model_server(Scripted(["summary"])) as server:
        for name in ("review_v1", "review_v2", "review_v3"):
            loaded[name] = importlib.import_module(name)
            loaded[name].CLIENT = openai_client(server)
        start_twenty(loaded["review_v1"])
        yield {"server": server, **loaded}
    for name, module in loaded.items():
        module.app.close()
        sys.modules.pop(name, None)


def start_twenty(module: Any) -> None:
    """20 tasks of batch b: 8 stopped after the model call (past analyze), 7
    stopped before analyze, 5 never started."""
    app = module.app
    app.enqueue("b", app.registered("review"), [{"n": n} for n in range(20)])
    for task_ids, step in ((REACHED, "apply"), (BEFORE, "analyze")):
        set_fault_hook(app, crash_before(step))
        for task_id in task_ids:
            with pytest.raises(Crash):
                app.run(app.registered("review"), task_id=task_id, n=int(task_id[4:]))
    module.CALLS.clear()


def check(target: str, *extra: str) -> Result:
    return CliRunner().invoke(cli_app, ["check", target, *extra])


def histories(module: Any) -> dict[str, Any]:
    store = module.app.store
    return {f"b/n={n}": store.load_history(f"b/n={n}") for n in range(20)}


def test_check_on_unchanged_code_finds_every_task_compatible(modules: dict[str, Any]) -> None:
    """The deployed code itself: exit 0, every task compatible, nothing called."""
    result = check("review_v1:app", "--json")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["diverged"] == 0
    assert {t["task"] for t in found["tasks"]} == set(REACHED + BEFORE + PENDING)
    assert modules["review_v1"].CALLS == []


def test_check_reports_exactly_the_tasks_that_reach_a_changed_step(
    modules: dict[str, Any],
) -> None:
    """The changed analyze: exactly the 8 tasks past it diverge, at position 2,
    with both fingerprints and the recorded tokens and cost of the model call a
    re-run would repeat; exit 1. No user function and no model is called, and
    no history changes."""
    v2, server = modules["review_v2"], modules["server"]
    requests, before = server.requests, histories(v2)
    result = check("review_v2:app", "--batch", "b", "--json")
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)
    diverged = {t["task"]: t for t in found["tasks"] if t["verdict"] != "compatible"}
    assert sorted(diverged) == sorted(REACHED)
    for task_id, report in diverged.items():
        recorded = before[task_id]
        assert report["verdict"] == "changed"
        assert report["position"] == 2
        assert "step 'analyze'" in report["entry"]
        assert report["recorded"] == recorded[2].fingerprint
        assert report["current"] != report["recorded"]
        usage = json.loads(recorded[3].output)["usage"]
        repeats = report["rerun_repeats"]
        assert repeats["calls"] == 1
        assert repeats["input_tokens"] == usage["input_tokens"] > 0
        expected = (usage["input_tokens"] * 1.0 + usage["output_tokens"] * 2.0) / 1e6
        assert repeats["estimated_cost"] == pytest.approx(expected, abs=1e-6)
    assert v2.CALLS == []
    assert server.requests == requests
    assert histories(v2) == before


def test_check_prints_a_table_of_the_diverging_tasks(modules: dict[str, Any]) -> None:
    """Without --json: one row per diverging task, naming the step and what changed."""
    result = check("review_v2:app")
    assert result.exit_code == 1
    rows = [line for line in result.stdout.splitlines() if line.startswith("b/n=")]
    assert sorted(row.split()[0] for row in rows) == sorted(REACHED)
    assert all("its code changed" in row for row in rows)
    assert "12 of 20 unfinished task(s) compatible" in result.stderr


def test_check_reports_a_renamed_step_as_diverged(modules: dict[str, Any]) -> None:
    """The step renamed at position 2: the same 8 tasks diverge, each naming the
    recorded and the current entry; nothing is called."""
    result = check("review_v3:app", "--json")
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)["tasks"]
    diverged = [t for t in found if t["verdict"] != "compatible"]
    assert sorted(t["task"] for t in diverged) == sorted(REACHED)
    for report in diverged:
        assert report["verdict"] == "diverged"
        assert report["position"] == 2
        assert "analyze" in report["recorded"]
        assert "assess" in report["current"]
    assert modules["review_v3"].CALLS == []
