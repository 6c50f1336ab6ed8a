"""Token-aware shared limits (``TokenRate``) around real model calls: the openai
SDK against the simulated model server on 127.0.0.1, which enforces its own
TPM and RPM (``Throttle``) and answers 429 past them.

The contention test uses the real clock with a 1-second window (the 60-second
window, with worker processes, is in ``tests/acceptance``); the 429 test uses
the fake clock, whose waits only move its own time.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import openai
import pytest

from cairn import (
    Cairn,
    ConfigurationError,
    Context,
    Rate,
    Retry,
    TaskFailed,
    TokenRate,
)
from cairn.agent import user
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.limits import LimitBook
from cairn.retry import NO_RETRY
from cairn.store import admin
from tests.agent_server import anthropic_client

REPLY = "word " * 20
MODEL = "gpt-4o-mini"


def reply(request: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": REPLY}


def client_of(server: SimulatedModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="sk-unused", max_retries=0)


# -- values -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: TokenRate(0), "tokens"),
        (lambda: TokenRate(1.5), "tokens"),  # type: ignore[arg-type]
        (lambda: TokenRate(100, per=0), "per"),
        (lambda: TokenRate(100, requests=0), "requests"),
        (lambda: TokenRate(100, output=0), "output"),
    ],
)
def test_bad_token_rates_are_refused(make: Any, says: str) -> None:
    """A TokenRate that cannot work raises ConfigurationError naming the field."""
    with pytest.raises(ConfigurationError, match=says):
        make()


def test_a_model_call_finds_its_token_limit_by_provider_and_model() -> None:
    """``limit=`` names the limit; without it, one declared as "provider:model"
    wins over one declared as "provider", and either is counted apart for each
    model; a call with none declared has none; naming a Rate is refused."""
    rate, exact = TokenRate(1000), TokenRate(50)
    book = LimitBook({"openai": rate, "openai:small": exact, "api": Rate(5)}, "o", timedelta(1))
    assert book.for_model("openai", "big", None) == ("openai:big", rate)
    assert book.for_model("openai", "small", None) == ("openai:small", exact)
    assert book.for_model("anthropic", "claude", None) is None
    assert book.for_model("anthropic", "claude", "openai") == ("openai", rate)
    with pytest.raises(ConfigurationError, match=r"must name a cairn\.TokenRate"):
        book.for_model("openai", "big", "api")
    assert TokenRate(10, per=timedelta(minutes=1)) == TokenRate(10, per=60)


# -- contention ---------------------------------------------------------------------------
def test_agents_on_threads_never_pass_the_servers_tpm_or_rpm(tmp_path: Path) -> None:
    """12 agents of 2 calls each on 6 threads, one SQLite store, against a server
    capped at 400 tokens and 6 requests a second, with the same TokenRate
    declared: no 1-second window of the server's own log holds more, no request
    is answered 429, and no call spent more than one attempt (waiting is not one)."""
    window = 1.0
    with SimulatedModelServer(
        reply, tokens_per_window=400, requests_per_window=6, window=window
    ) as server:
        app = Cairn(
            f"sqlite:///{tmp_path / 'cairn.db'}",
            limits={"openai": TokenRate(400, per=window, requests=6, output=40)},
        )
        client = client_of(server)

        @app.task
        def agent(ctx: Context, n: int) -> str:
            conv = ctx.conversation("main", system="Answer briefly.", client=client)
            for turn in range(2):
                conv.append(user(f"agent {n}, question {turn}"))
                ctx.llm(conv, model=MODEL, max_tokens=40)
            return "done"

        with app:
            report = app.run_batch(
                "agents", agent, [{"n": n} for n in range(12)], concurrency=6, progress=False
            )
            attempts = {
                step.attempts
                for task in admin(app.store).list_tasks(batch="agents")
                for step in app.store.load_history(task.id).values()
            }
    assert report.counts == {"completed": 12}
    assert server.requests == 24
    assert server.throttle.refused == 0
    tokens, requests = server.throttle.busiest()
    assert tokens <= 400
    assert requests <= 6
    assert attempts == {1}


# -- 429 -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "5"}, 5),
        ({"x-ratelimit-reset-requests": "120ms", "x-ratelimit-reset-tokens": "1m30s"}, 90),
    ],
)
def test_a_429_closes_the_limit_for_every_task_not_only_the_caller(
    tmp_path: Path, headers: dict[str, str], seconds: int
) -> None:
    """Task A's call is answered 429 with Retry-After (or, without it, OpenAI's
    rate-limit reset headers: the longer one counts), and A gives up on it.
    Task B, started afterwards, does not send until that wait has passed (its
    request reaches the server at A's time + the wait or later, by the fake
    clock), and B's call spends one attempt."""
    clock = FakeClock()
    arrivals: list[Any] = []

    def timed(request: dict[str, Any]) -> dict[str, Any]:
        arrivals.append(clock.now())
        return reply(request)

    with SimulatedModelServer(timed) as server:
        app = Cairn(
            f"sqlite:///{tmp_path / 'cairn.db'}",
            clock=clock,
            limits={"openai": TokenRate(10_000, per=60)},
            task_retry=NO_RETRY,
        )
        client = client_of(server)
        impatient = Retry(attempts=1, max_deferral=0)

        @app.task
        def ask(ctx: Context, who: str) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": who}], model=MODEL, client=client,
                max_tokens=40, retry=impatient,
            )  # fmt: skip
            return str(answer.content)

        with app:
            server.fail_next(1, 429, headers=headers)
            told = clock.now()
            with pytest.raises(TaskFailed, match="429"):
                app.run(ask, who="a", task_id="a")
            assert app.run(ask, who="b", task_id="b") == REPLY
            (step,) = app.store.load_history("b").values()
    assert server.requests == 2
    assert arrivals[0] >= told + timedelta(seconds=seconds)
    assert step.attempts == 1


# -- the provider's rate-limit headers ---------------------------------------------------
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("provider_tokens", "stream", "waits"),
    [(60, False, True), (60, True, True), (1000, False, False)],
    ids=["short", "short-streamed", "ample"],
)
def test_rate_limit_headers_narrow_the_limit_for_every_task(
    tmp_path: Path, provider: str, provider_tokens: int, stream: bool, waits: bool
) -> None:
    """The server's limit (60 tokens a minute) is far below the app's TokenRate.
    Task A's call is answered 200 with the provider's rate-limit headers (OpenAI's
    x-ratelimit-*, Anthropic's anthropic-ratelimit-* against its Date header)
    saying fewer tokens are left than A's call needed: task B, started
    afterwards, does not send before the provider's reset (a minute on the fake
    clock, which the server's limit also goes by), and is answered at its first
    attempt; a streamed answer's headers count the same. With room left (1000
    tokens a minute), B is sent at once."""
    clock = FakeClock()
    arrivals: list[Any] = []

    def timed(request: dict[str, Any]) -> dict[str, Any]:
        arrivals.append(clock.now())
        return reply(request)

    with SimulatedModelServer(
        timed, tokens_per_window=provider_tokens, window=60, clock=lambda: clock.now().timestamp()
    ) as server:
        app = Cairn(
            f"sqlite:///{tmp_path / 'cairn.db'}",
            clock=clock,
            limits={provider: TokenRate(100_000, per=60)},
            task_retry=NO_RETRY,
        )
        client = client_of(server) if provider == "openai" else anthropic_client(server)
        impatient = Retry(attempts=1, max_deferral=0)

        @app.task
        def ask(ctx: Context, who: str) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": who}], model=f"{provider}-model", client=client,
                max_tokens=40, retry=impatient, stream=stream,
            )  # fmt: skip
            return str(answer.content)

        with app:
            assert app.run(ask, who="a", task_id="a").strip() == REPLY.strip()
            assert app.run(ask, who="b", task_id="b").strip() == REPLY.strip()
            (step,) = app.store.load_history("b").values()
    assert server.requests == 2
    assert step.attempts == 1
    if waits:
        assert arrivals[1] >= arrivals[0] + timedelta(seconds=60)
    else:
        assert arrivals[1] == arrivals[0]


def test_a_call_bigger_than_its_limit_fails_saying_what_to_change(tmp_path: Path) -> None:
    """A call whose prompt plus max_tokens exceeds the limit's whole window would
    wait for ever: it fails at once, naming the limit and what to lower, and
    sends nothing."""
    with SimulatedModelServer(reply) as server:
        app = Cairn(
            f"sqlite:///{tmp_path / 'cairn.db'}",
            limits={"small": TokenRate(100)},
            task_retry=NO_RETRY,
        )
        client = client_of(server)

        @app.task
        def ask(ctx: Context) -> str:
            answer = ctx.llm_call(
                [{"role": "user", "content": "hi"}], model=MODEL, client=client,
                max_tokens=500, limit="small",
            )  # fmt: skip
            return str(answer.content)

        with app, pytest.raises(TaskFailed, match=r"more than limit 'small'.*lower max_tokens"):
            app.run(ask)
    assert server.requests == 0
