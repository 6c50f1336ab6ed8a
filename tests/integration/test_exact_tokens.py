"""Exact token counts for OpenAI models (the ``tokens`` extra), held against a server.

The model server is ``SimulatedModelServer`` given the real encoding
(``ExactCounter``): it counts each prompt as OpenAI's cookbook does
(``openai_prompt_tokens``: 3 per message, the role's and a name's tokens, 3 for
the reply's priming) and reports it as the call's usage, as the API would.
Cairn's count of the context before each call must equal the server's count of
the request it then receives, for prose, JSON, code and Japanese, before the
first call (all cairn's count) and after it (the provider's count plus cairn's
count of what came since). Requests go through the real openai SDK over HTTP.

These tests need the extra; outside CI they are skipped without it, in CI
(``CI=true``, where the ``test`` extra installs it) they run and fail without it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import Cairn, Context
from cairn.admin import conversation_detail
from cairn.agent import ExactCounter, counter_for, describe_counter, tokens, user
from cairn.agent.simulate import SimulatedModelServer, openai_prompt_tokens
from cairn.agent.tokens import (
    DEFAULT_COUNTER,
    EstimateCounter,
    count_messages,
    encoding_for_model,
    has_exact_counts,
)
from cairn.store import admin
from tests.agent_server import openai_client

needs_extra = pytest.mark.skipif(
    not has_exact_counts() and os.environ.get("CI") != "true",
    reason="the tokens extra (bpe-openai) is not installed: pip install -e '.[tokens]'",
)

SYSTEM = "You answer questions about the text you are given, briefly."
PROSE = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting "
    "the steps out of habit rather than need. There were one hundred and twelve of them, "
    "worn smooth in the middle by a century of boots. From the lamp room he could see the "
    "fishing boats returning, their wakes drawing pale lines across the darkening water, "
    "and beyond them the storm that the radio had promised since noon. "
) * 4
JSON = json.dumps(
    {
        "orders": [
            {
                "id": f"ord-{n:04d}",
                "customer": {"name": f"Customer {n}", "email": f"c{n}@example.com"},
                "items": [
                    {"sku": f"SKU-{n * 7 + i}", "qty": i + 1, "price": 9.5 * i} for i in (0, 1, 2)
                ],
                "paid": n % 2 == 0,
                "note": None,
            }
            for n in range(6)
        ]
    },
    indent=2,
)
CODE = (
    Path(__file__).resolve().parents[2] / "src" / "cairn" / "agent" / "clearing.py"
).read_text()[:3000]
JAPANESE = (
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
    "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
    "東京の天気は晴れ、最高気温は二十三度の予報です。会議は午後三時から第二会議室で行います。"
    "資料は事前に共有フォルダへアップロードしてください。ご不明な点があればお知らせください。"
) * 3
TEXTS = {"prose": PROSE, "json": JSON, "code": CODE, "japanese": JAPANESE}
MODELS = {"o200k_base": "gpt-4o-mini", "cl100k_base": "gpt-4"}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The model: answers with the first 300 characters of the last message."""
    return {"role": "assistant", "content": str(request["messages"][-1]["content"])[:300]}


@pytest.fixture(params=sorted(MODELS))
def encoding(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def exact_server(encoding: str) -> Iterator[SimulatedModelServer]:
    """A model server that counts prompts with the real ``encoding``."""
    with SimulatedModelServer(answer, counter=ExactCounter(encoding)) as server:
        yield server


@needs_extra
@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_cairns_counts_are_the_servers_exactly(
    app: Cairn, exact_server: SimulatedModelServer, encoding: str, kind: str
) -> None:
    """A conversation opened for an OpenAI model counts its context with that
    model's encoding, and the count before each call equals the prompt tokens the
    server counted in the request it got: before the first call (all cairn's own
    count, framing included) and before the second (the provider's count of the
    first prompt, the reply, and a message with a ``name``, counted by cairn)."""
    model = MODELS[encoding]
    client = openai_client(exact_server)
    text = TEXTS[kind]

    @app.task(name="talk")
    def talk(ctx: Context) -> dict[str, Any]:
        conv = ctx.conversation("main", system=SYSTEM, model=model)
        conv.append(user(text))
        first = conv.tokens
        one = ctx.llm(conv, model=model, client=client)
        conv.append({"role": "user", "name": "reviewer", "content": f"And now this:\n{text}"})
        second = conv.tokens
        two = ctx.llm(conv, model=model, client=client)
        return {
            "counter": conv.counter_name,
            "cairn": [first, second],
            "server": [one.usage.input_tokens, two.usage.input_tokens],
        }

    result = app.run(talk, task_id="t")
    assert result["counter"] == f"{encoding} (exact)"
    assert result["cairn"] == result["server"]
    # The server's counts are the cookbook's rule on the requests it received.
    counter = ExactCounter(encoding)
    sent = [openai_prompt_tokens(body["messages"], counter) for body in exact_server.bodies]
    assert sent == result["server"]
    # And cairn's own count of a whole prompt is the same number.
    assert [count_messages(b["messages"], counter) for b in exact_server.bodies] == sent
    # The estimate would not have been exact for this text: the test measures something.
    estimate = [count_messages(b["messages"], DEFAULT_COUNTER) for b in exact_server.bodies]
    assert estimate != sent
    stats = conversation_detail(admin(app.store), "t").stats()
    assert stats["token counts"] == f"{encoding} (exact), the provider's at each call"


@needs_extra
def test_the_model_name_picks_the_encoding() -> None:
    """gpt-4o, gpt-4.1, gpt-5 and the o-series count with o200k_base; gpt-4 and
    gpt-3.5 with cl100k_base; a fine-tuned or provider-prefixed name by its base
    model; any other model (another provider's) with the estimate."""
    o200k = [
        "gpt-4o",
        "gpt-4o-mini-2024-07-18",
        "gpt-4.1-nano",
        "gpt-5",
        "o1",
        "o3-mini",
        "o4-mini",
    ]
    o200k += ["ft:gpt-4o-mini:acme::abc123", "openai/gpt-4.1"]
    cl100k = ["gpt-4", "gpt-4-turbo", "gpt-4-0613", "gpt-3.5-turbo", "gpt-35-turbo"]
    other = ["claude-sonnet-4", "llama-3.1-70b", "omni-model", "gpt-4x"]
    assert {encoding_for_model(m) for m in o200k} == {"o200k_base"}
    assert {encoding_for_model(m) for m in cl100k} == {"cl100k_base"}
    assert {encoding_for_model(m) for m in other} == {None}
    assert describe_counter(counter_for("gpt-4o")) == "o200k_base (exact)"
    assert describe_counter(counter_for("gpt-3.5-turbo")) == "cl100k_base (exact)"
    assert counter_for("claude-sonnet-4") is DEFAULT_COUNTER
    assert counter_for(None) is DEFAULT_COUNTER


@needs_extra
def test_a_special_token_in_a_message_is_text() -> None:
    """A message that contains "<|endoftext|>" is counted as the text it is (the
    API does not read it as a special token), not refused."""
    counter = ExactCounter("o200k_base")
    assert counter.count("a <|endoftext|> b") > 3


@pytest.fixture
def without_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokens extra made unimportable, as on an install without it (and no
    encoding loaded yet, as in a fresh process)."""
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    monkeypatch.setattr(tokens, "_loaded", {})


@pytest.mark.usefixtures("without_extra")
def test_without_the_extra_an_openai_conversation_counts_with_the_estimate(app: Cairn) -> None:
    """Without the extra, a conversation opened for gpt-4o uses the estimate, says
    so (its counter name, the reply row, ``cairn conversation``), and its count
    before the call is the estimate the server (counting with it too) reports."""
    assert not has_exact_counts()
    with pytest.raises(ImportError, match=r"cairn-durable\[tokens\]"):
        ExactCounter("o200k_base")
    with SimulatedModelServer(answer) as server:
        client = openai_client(server)

        @app.task(name="talk")
        def talk(ctx: Context) -> dict[str, Any]:
            conv = ctx.conversation("main", system=SYSTEM, model="gpt-4o")
            conv.append(user(PROSE))
            before = conv.tokens
            reply = ctx.llm(conv, model="gpt-4o", client=client)
            return {
                "counter": conv.counter_name,
                "before": before,
                "sent": reply.usage.input_tokens,
            }

        result = app.run(talk, task_id="t")
    assert isinstance(counter_for("gpt-4o"), EstimateCounter)
    assert result == {"counter": "estimate", "before": result["sent"], "sent": result["sent"]}
    stats = conversation_detail(admin(app.store), "t").stats()
    assert stats["token counts"] == "estimate, the provider's at each call"


@needs_extra
def test_a_text_too_long_for_one_encode_is_counted_in_pieces() -> None:
    """bpe-openai refuses to encode a million characters at once; the counter
    counts a 10 MB text in pieces instead (each word of ``"word "`` one token),
    and a text above one piece but within the encoder's reach counts as one
    encode of it does."""
    counter = ExactCounter("o200k_base")
    assert counter.count("word " * 2_000_000) == 2_000_001
    prose = PROSE * 200
    assert len(prose) > 100_000
    assert counter.count(prose) == len(counter._encode(prose))
