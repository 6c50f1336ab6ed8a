"""A step whose code changed while its task was in flight: fingerprints, the
``on_change`` policies, and ``ctx.patched``.

Every test runs on SQLite and on PostgreSQL (``url``). Each "deploy" is a second
app on the same store (``second_process``), registering the same task name
with new code, after the first run was 'killed' before a later step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn import Cairn, CodeChanged, Context, TaskFailed
from cairn.agent import system as system_message
from cairn.agent import user
from cairn.cli import app as cli_app
from cairn.clock import FakeClock
from cairn.testing import set_fault_hook
from cairn.versions import check_app
from tests.agent_server import Scripted, model_server, openai_client
from tests.crashes import LEASE, PAST_LEASE, Crash, crash_before, second_process
from tests.crashes import url as url  # a fixture: pytest finds it by this name

Body = Callable[[], str]


def review(calls: Counter[str], analyze: Body, *, charge: bool = True) -> Callable[..., Any]:
    """The task: fetch, analyze, summarize, an operation, apply. ``calls``
    counts every step function and the operation each time it runs."""

    def fetch() -> str:
        calls["fetch"] += 1
        return "page"

    def counted_analyze() -> str:
        calls["analyze"] += 1
        return analyze()

    def summarize(verdict: str) -> str:
        calls["summarize"] += 1
        return f"summary of {verdict}"

    def post(key: str) -> str:
        calls["charge"] += 1
        return "posted"

    def apply(summary: str) -> str:
        calls["apply"] += 1
        return f"applied {summary}"

    def task(ctx: Context) -> str:
        ctx.step("fetch", fetch)
        verdict = ctx.step("analyze", analyze_code(counted_analyze, analyze))
        summary = ctx.step("summarize", summarize, verdict)
        if charge:
            ctx.once(f"{ctx.task_id}/post", post)
        return ctx.step("apply", apply, summary)

    return task


def analyze_code(counted: Body, body: Body) -> Body:
    """The analyze step as cairn sees it: ``counted`` runs, ``body``'s code is
    what its fingerprint is made of (so two bodies give two fingerprints)."""
    counted.__wrapped__ = body  # type: ignore[attr-defined]
    return counted


def old_analyze() -> str:
    return "verdict: fine"


def new_analyze() -> str:
    return "verdict: fine, with a stricter parser"


def start_on_old_code(first: Cairn, calls: Counter[str]) -> None:
    """Run task rev-1 on the old code until it is killed before ``apply``."""
    first.task(name="review")(review(calls, old_analyze))
    set_fault_hook(first, crash_before("apply"))
    with pytest.raises(Crash):
        first.run(first.registered("review"), task_id="rev-1")
    first.close()


@pytest.fixture
def clock() -> FakeClock:
    """The fake clock both 'processes' share."""
    return FakeClock()


@pytest.fixture
def first(url: str, clock: FakeClock) -> Cairn:
    """The app of the process that starts the task on the old code."""
    return Cairn(url, clock=clock, lease=LEASE)


def test_a_step_body_changed_under_the_same_name_fails_naming_it(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """By default (fail) a changed step stops the task with CodeChanged: it names
    the task, the step, its position and both fingerprints; nothing is rewritten
    and no step runs again."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        before = other.store.load_history("rev-1")
        task = other.task(name="review")(review(calls, new_analyze))
        with pytest.raises(TaskFailed) as failed:
            other.run(task, task_id="rev-1")
        after = other.store.load_history("rev-1")
    cause = failed.value.__cause__
    assert isinstance(cause, CodeChanged)
    assert (cause.task_id, cause.seq) == ("rev-1", 2)
    assert cause.recorded == before[2].fingerprint
    assert cause.recorded.startswith("code:")
    assert cause.current.startswith("code:")
    assert cause.recorded != cause.current
    for part in ("'rev-1'", "step 'analyze' (position 2)", "its code changed", "rerun", "keep"):
        assert part in str(cause)
    assert after == before
    assert calls == Counter(fetch=1, analyze=1, summarize=1, charge=1)


def test_unchanged_code_replays_every_step_without_calling_it(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """The same code on the next process: fingerprints match, nothing runs twice."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        task = other.task(name="review")(review(calls, old_analyze))
        assert other.run(task, task_id="rev-1") == "applied summary of verdict: fine"
    assert calls == Counter(fetch=1, analyze=1, summarize=1, charge=1, apply=1)


def test_rerun_runs_the_changed_step_and_later_steps_again_but_never_the_operation(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """on_change='rerun': the changed step and every later step run again (with
    the new code's values), earlier steps replay, the completed operation is
    not called again; the new records carry the new fingerprint."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    clock.advance(PAST_LEASE)
    with second_process(url, clock, on_change="rerun") as other:
        old = other.store.load_history("rev-1")
        task = other.task(name="review")(review(calls, new_analyze))
        result = other.run(task, task_id="rev-1")
        history = other.store.load_history("rev-1")
    assert result == "applied summary of verdict: fine, with a stricter parser"
    assert calls == Counter(fetch=1, analyze=2, summarize=2, charge=1, apply=1)
    assert history[1].fingerprint == old[1].fingerprint
    assert history[2].fingerprint != old[2].fingerprint
    assert history[2].status == "completed"
    assert history[4] == old[4]  # the operation's record is untouched


def test_a_rerun_killed_halfway_still_reruns_the_rest(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """The re-run is decided in one fenced write: killed after the changed step
    ran again but before the next one, the next process still runs summarize
    again instead of replaying its stale value."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    clock.advance(PAST_LEASE)
    with second_process(url, clock, on_change="rerun") as other:
        set_fault_hook(other, crash_before("summarize"))
        with pytest.raises(Crash):
            other.run(other.task(name="review")(review(calls, new_analyze)), task_id="rev-1")
    clock.advance(PAST_LEASE)
    third = second_process(url, clock, on_change="rerun")
    third.owner = third.owner.replace("elsewhere", "thirdhost")
    with third:
        result = third.run(third.task(name="review")(review(calls, new_analyze)), task_id="rev-1")
    assert result == "applied summary of verdict: fine, with a stricter parser"
    assert calls == Counter(fetch=1, analyze=2, summarize=2, charge=1, apply=1)


def test_keep_replays_the_old_result_and_marks_the_entry_kept(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """on_change='keep' (here on the task): the changed step is not called, its
    recorded value is used, and its record says which code kept it."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        task = other.task(name="review", on_change="keep")(review(calls, new_analyze))
        result = other.run(task, task_id="rev-1")
        history = other.store.load_history("rev-1")
    assert result == "applied summary of verdict: fine"
    assert calls == Counter(fetch=1, analyze=1, summarize=1, charge=1, apply=1)
    assert history[2].kept is not None
    assert history[2].kept != history[2].fingerprint
    assert history[1].kept is None
    shown = CliRunner().invoke(cli_app, ["show", "rev-1", "--store", url])
    assert shown.exit_code == 0, shown.output
    kept_rows = [line for line in shown.stdout.splitlines() if "(kept)" in line]
    assert len(kept_rows) == 1
    assert "analyze" in kept_rows[0]
    assert "position 2: 'analyze' was kept: its code changed" in shown.stdout


def test_entries_recorded_before_fingerprints_are_taken_as_compatible(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """A history written before schema 3 has no fingerprints: it replays as it
    did (nothing to compare), even under the fail policy."""
    calls: Counter[str] = Counter()
    start_on_old_code(first, calls)
    with Cairn(url, clock=clock) as plain:
        plain.store._exec("UPDATE steps SET fingerprint = NULL", ())  # type: ignore[attr-defined]
    clock.advance(PAST_LEASE)
    with second_process(url, clock) as other:
        task = other.task(name="review")(review(calls, new_analyze))
        assert other.run(task, task_id="rev-1") == "applied summary of verdict: fine"
    assert calls["analyze"] == 1


def fetch_page(calls: Counter[str]) -> str:
    calls["fetch"] += 1
    return "page"


def parse(calls: Counter[str]) -> str:
    calls["parse"] += 1
    return "lenient"


def parse_v2(calls: Counter[str]) -> str:
    calls["parse-v2"] += 1
    return "strict"


def unpatched_task(calls: Counter[str]) -> Callable[..., Any]:
    """The old code: fetch, parse, report."""

    def task(ctx: Context, n: int) -> str:
        ctx.step("fetch", fetch_page, calls)
        verdict = str(ctx.step("parse", parse, calls))
        ctx.step("report", fetch_page, calls)
        return verdict

    return task


def patched_task(seen: dict[str, bool], calls: Counter[str]) -> Callable[..., Any]:
    """The new code: a fix behind ctx.patched at the second position."""

    def task(ctx: Context, n: int) -> str:
        ctx.step("fetch", fetch_page, calls)
        seen[ctx.task_id] = fixed = ctx.patched("stricter-parser")
        if fixed:
            return str(ctx.step("parse-v2", parse_v2, calls))
        return str(ctx.step("parse", parse, calls))

    return task


def test_patched_is_false_for_tasks_past_it_and_true_for_the_rest(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """A task that had passed the patch point on the old code gets False (and
    replays its old step); one killed before it, and a new one, get True, and
    keep getting True when replayed again."""
    calls: Counter[str] = Counter()
    first.task(name="parse")(unpatched_task(calls))
    set_fault_hook(first, crash_before("report"))
    with pytest.raises(Crash):
        first.run(first.registered("parse"), task_id="passed", n=1)
    set_fault_hook(first, crash_before("parse"))
    with pytest.raises(Crash):
        first.run(first.registered("parse"), task_id="before", n=2)
    first.close()
    clock.advance(PAST_LEASE)
    seen: dict[str, bool] = {}
    numbers = {"passed": 1, "before": 2, "fresh": 3}
    with second_process(url, clock) as other:
        task = other.task(name="parse")(patched_task(seen, calls))
        results = {tid: other.run(task, task_id=tid, n=n) for tid, n in numbers.items()}
        history = other.store.load_history("before")
    assert seen == {"passed": False, "before": True, "fresh": True}
    assert results == {"passed": "lenient", "before": "strict", "fresh": "strict"}
    assert calls["parse"] == 1
    assert calls["parse-v2"] == 2
    assert (history[2].kind, history[2].name) == ("input", "patched stricter-parser")


def asking(system: str, calls: Counter[str], client: Any) -> Callable[..., Any]:
    """A task that asks the model with ``system`` as its system text, then
    applies the answer in a step."""

    def apply(answer: str) -> str:
        calls["apply"] += 1
        return answer

    def task(ctx: Context) -> str:
        reply = ctx.llm_call(
            [system_message(system), user("Review it.")], model="tiny", client=client
        )
        return str(ctx.step("apply", apply, reply.content))

    return task


@pytest.mark.parametrize("policy", ["fail", "rerun"])
def test_a_changed_system_prompt_stops_a_model_call_and_sends_nothing(
    first: Cairn, url: str, clock: FakeClock, policy: str
) -> None:
    """A model call recorded under one system text, replayed under another:
    CodeChanged says the system text changed; on_change='rerun' does not send
    the request again without rerun_models (it says so). The server sees one
    request in all."""
    calls: Counter[str] = Counter()
    with model_server(Scripted(["fine"])) as server:
        client = openai_client(server)
        first.task(name="ask")(asking("Be brief.", calls, client))
        set_fault_hook(first, crash_before("apply"))
        with pytest.raises(Crash):
            first.run(first.registered("ask"), task_id="ask-1")
        first.close()
        clock.advance(PAST_LEASE)
        with second_process(url, clock, on_change=policy) as other:
            task = other.task(name="ask")(asking("Be thorough.", calls, client))
            with pytest.raises(TaskFailed) as failed:
                other.run(task, task_id="ask-1")
        assert server.requests == 1
    cause = failed.value.__cause__
    assert isinstance(cause, CodeChanged)
    assert "the system text changed" in str(cause)
    assert cause.recorded.startswith("model:tiny system:")
    assert ("only with rerun_models=True" in str(cause)) == (policy == "rerun")
    assert calls["apply"] == 0


def test_rerun_with_rerun_models_sends_a_changed_model_call_again(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """Asked (rerun_models=True), rerun sends the changed ctx.llm_call again
    with the new system text, records the new reply under the new fingerprint,
    and the task goes on with it."""
    calls: Counter[str] = Counter()
    with model_server(Scripted(["fine", "strict"])) as server:
        client = openai_client(server)
        first.task(name="ask")(asking("Be brief.", calls, client))
        set_fault_hook(first, crash_before("apply"))
        with pytest.raises(Crash):
            first.run(first.registered("ask"), task_id="ask-1")
        first.close()
        with Cairn(url) as reader:
            old = reader.store.load_history("ask-1")
        clock.advance(PAST_LEASE)
        with second_process(url, clock, on_change="rerun", rerun_models=True) as other:
            task = other.task(name="ask")(asking("Be thorough.", calls, client))
            result = other.run(task, task_id="ask-1")
            history = other.store.load_history("ask-1")
        assert server.requests == 2
    assert result == "strict"
    assert history[1].fingerprint != old[1].fingerprint
    assert calls["apply"] == 1


async def old_async_analyze() -> str:
    return "verdict: fine"


async def new_async_analyze() -> str:
    return "verdict: strict"


def test_check_app_replays_an_async_task_without_calling_it(
    first: Cairn, url: str, clock: FakeClock
) -> None:
    """An async task stopped after its changed step: check_app (what `cairn
    check` runs) reports it changed at that step and calls no step function;
    with the old code it is compatible."""
    calls: Counter[str] = Counter()

    def build(app: Cairn, analyze: Callable[[], Any]) -> None:
        async def counted() -> str:
            calls["analyze"] += 1
            return str(await analyze())

        counted.__wrapped__ = analyze  # type: ignore[attr-defined]

        @app.task(name="areview")
        async def areview(ctx: Context) -> str:
            verdict = await ctx.step("analyze", counted)
            return str(await ctx.step("apply", counted_apply, verdict))

        async def counted_apply(verdict: str) -> str:
            calls["apply"] += 1
            return verdict

    build(first, old_async_analyze)
    set_fault_hook(first, crash_before("apply"))
    with pytest.raises(Crash):
        first.run(first.registered("areview"), task_id="async-1")
    first.close()
    calls.clear()
    with Cairn(url, clock=clock) as same, Cairn(url, clock=clock) as changed_app:
        build(same, old_async_analyze)
        build(changed_app, new_async_analyze)
        (unchanged,) = check_app(same)
        (changed,) = check_app(changed_app)
    assert unchanged.ok
    assert (changed.replay.verdict, changed.replay.seq) == ("changed", 1)
    assert "step 'analyze'" in changed.replay.label
    assert calls == Counter()
