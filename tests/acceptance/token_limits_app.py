"""The app ``cairn worker`` subprocesses run in the token-limit and budget tests.

``cairn worker tests.acceptance.token_limits_app:app --store URL`` runs task
``agent``: a conversation of ``CAIRN_TEST_TURNS`` (default 2) model calls
through the openai SDK to the simulated model server at
``CAIRN_TEST_MODEL_URL``, each with ``max_tokens=MAX_TOKENS``. The app declares
``TokenRate(CAIRN_TEST_TPM, per=CAIRN_TEST_WINDOW, requests=CAIRN_TEST_RPM)``
for the provider, the caps the test also gives the server. Every answered
call appends ``task_id turn pid`` to ``CAIRN_TEST_COUNTS`` if that is set.

``CAIRN_TEST_LEASE`` sets the app's lease in seconds (default 30).
"""

from __future__ import annotations

import os

import openai

from cairn import Cairn, Context, TaskDef, TokenRate
from cairn.agent import Price, PriceTable, user
from cairn.retry import NO_RETRY

MODEL = "m-acceptance"
MAX_TOKENS = 60
# Dollars per million tokens, so that a budget in dollars binds on a small batch.
PRICES = PriceTable({MODEL: Price(input=100.0, output=300.0)})


def rate() -> TokenRate:
    """The token limit, as the test's environment sets it."""
    env = os.environ
    requests = env.get("CAIRN_TEST_RPM")
    return TokenRate(
        int(env.get("CAIRN_TEST_TPM") or 1_000_000),
        per=float(env.get("CAIRN_TEST_WINDOW") or 60.0),
        requests=int(requests) if requests else None,
        output=MAX_TOKENS,
    )


def _note(task_id: str, turn: int) -> None:
    path = os.environ.get("CAIRN_TEST_COUNTS")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id} {turn} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def agent(ctx: Context, n: int) -> str:
    client = openai.OpenAI(
        base_url=os.environ["CAIRN_TEST_MODEL_URL"], api_key="sk-unused", max_retries=0
    )
    conv = ctx.conversation("main", system="You answer in one short paragraph.", client=client)
    answer = ""
    for turn in range(int(os.environ.get("CAIRN_TEST_TURNS") or 2)):
        conv.append(user(f"Agent {n}, question {turn}: what should we check next?"))
        reply = ctx.llm(conv, model=MODEL, max_tokens=MAX_TOKENS, prices=PRICES)
        _note(ctx.task_id, turn)
        answer = str(reply.content)
    return answer


def make_app(store: str | None = None) -> tuple[Cairn, TaskDef[[int], str]]:
    """A new app with the task registered (tests enqueue through their own)."""
    created = Cairn(
        store,
        lease=float(os.environ.get("CAIRN_TEST_LEASE") or 30.0),
        poll_interval=0.1,
        task_retry=NO_RETRY,
        limits={"openai": rate()},
    )
    return created, created.task(agent)


app, _ = make_app()
