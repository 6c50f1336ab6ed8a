"""No secret, nor a masked form of one, in anything cairn stores or emits.

Each model SDK cairn drives (openai and anthropic through ``ctx.llm_call``, the
OpenAI Agents SDK, Pydantic AI) meets a model server on 127.0.0.1 that refuses
with 401, 403 and 500 answers echoing four secrets: the client's key, the value
of its custom credential header, a credential environment variable's value and
a secret registered with ``Cairn(secrets=...)``, each in the body as nested
JSON, in the answer's headers, in a Python repr, and in the provider's masked
form (first 8 and last 4 characters). The batch runs on both stores with live
spans to an OTLP receiver and cairn's JSON logs on (the SDKs' own debug logging
among them); an alert quoting the server's answer goes to a local webhook, and
the batch is exported. Then every byte is searched: the SQLite file, its WAL
and the blob folder (or every row of the PostgreSQL database), each message's
unpacked content, the log, the spans as they arrived, the alert as it arrived,
and the export file. None of the secrets is anywhere, in any form; the
redaction mark is.

The suite runs on the newest SDK releases the index offers and, in CI, again
on the lowest each extra allows (``.ci/run``), so an SDK release that changes
how it shows a key turns this red, not a user's store.
"""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import psycopg
import pytest

from cairn import Cairn, Context, Retry, TaskDef
from cairn.agent.messages import user
from cairn.agent.simulate import SimulatedModelServer
from cairn.clock import FakeClock
from cairn.observe.live import trace_live
from cairn.observe.logs import JsonFormatter
from cairn.observe.notifiers import Message, WebhookNotifier
from cairn.portable.transfer import export_batch
from cairn.redaction import REDACTED
from cairn.store.sql import unpack_content
from cairn.testing.servers import WebhookServer
from tests.agent_server import Scripted
from tests.otlp_receiver import OtlpReceiver

KEY = "local-proxy-key-7f3a9c0d21"  # the client's key: no known key shape
HEADER_SECRET = "gateway-secret-5e1b77aa90"  # a custom credential header's value
ENV_NAME = "CAIRN_TEST_GATEWAY_TOKEN"
ENV_SECRET = "envtoken-9c1d2e3f4a5b6c"  # that environment variable's value
REGISTERED = "registered-secret-77e1a0b2c3"  # given to Cairn(secrets=...)
SECRETS = (KEY, HEADER_SECRET, ENV_SECRET, REGISTERED)
STATUSES = (401, 403, 500)
BATCH = "secrets"
MODEL = "gpt-4o-mini"


def masked(secret: str) -> str:
    """The provider's own masked form of a key: its first 8 and last 4 characters."""
    return f"{secret[:8]}{'*' * 14}{secret[-4:]}"


def _echo(shape: str) -> tuple[dict[str, str], str]:
    """The headers and the error message of an answer echoing every secret in ``shape``."""
    if shape == "json":
        detail = {"api_key": KEY, "headers": {"api-key": HEADER_SECRET}, "env": ENV_SECRET}
        body = {"detail": detail, "registered": REGISTERED}
        return {}, json.dumps({**body, "hint": f"Incorrect API key provided: {masked(KEY)}"})
    if shape == "headers":
        headers = {
            "x-echo-api-key": KEY,
            "www-authenticate": f'Bearer realm="{HEADER_SECRET}"',
            "x-echo-env": ENV_SECRET,
            "x-echo-registered": REGISTERED,
        }
        return headers, f"refused; the key was {masked(HEADER_SECRET)}"
    seen = {"api_key": KEY, "headers": {"api-key": HEADER_SECRET}}
    text = f"{seen!r} {ENV_SECRET!r} {REGISTERED!r} masked {masked(ENV_SECRET)}"
    return {}, text + f" {masked(REGISTERED)}"


SHAPES = ("json", "headers", "repr")
CASES = [(status, shape) for status in STATUSES for shape in SHAPES]


# -- the four ways a task calls a model ----------------------------------------------------------
Servers = dict[str, SimulatedModelServer]
Make = Callable[[Cairn, Servers], TaskDef[..., Any]]


def _openai(server: SimulatedModelServer) -> openai.OpenAI:
    headers = {"api-key": HEADER_SECRET}
    return openai.OpenAI(
        base_url=server.base_url, api_key=KEY, max_retries=0, default_headers=headers
    )


def _async_openai(server: SimulatedModelServer) -> openai.AsyncOpenAI:
    # The frameworks need openai 3, on httpx2 (the lowest-versions pass of the
    # plain SDKs has openai 1, and no framework). No kept-alive connections:
    # they would outlive each task's event loop.
    httpx2 = pytest.importorskip("httpx2")
    http = openai.DefaultAsyncHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))
    return openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key=KEY,
        max_retries=0,
        http_client=http,
        default_headers={"api-key": HEADER_SECRET},
    )


def openai_task(app: Cairn, servers: Servers) -> TaskDef[..., Any]:
    @app.task(name="ask", retry=None)
    def ask(ctx: Context, case: str) -> str:
        reply = ctx.llm_call(
            [user("Say done.")], model=MODEL, client=_openai(servers[case]), retry=Retry(attempts=2)
        )
        return str(reply)

    return ask


def anthropic_task(app: Cairn, servers: Servers) -> TaskDef[..., Any]:
    @app.task(name="ask", retry=None)
    def ask(ctx: Context, case: str) -> str:
        client = anthropic.Anthropic(
            base_url=servers[case].anthropic_base_url,
            api_key=KEY,
            max_retries=0,
            default_headers={"x-gateway-key": HEADER_SECRET},
        )
        reply = ctx.llm_call(
            [user("Say done.")], model="claude-x", client=client, retry=Retry(attempts=2)
        )
        return str(reply)

    return ask


def agents_sdk_task(app: Cairn, servers: Servers) -> TaskDef[..., Any]:
    agents = pytest.importorskip("agents")
    from cairn.integrations.openai_agents import run as run_agent

    @app.task(name="ask", retry=None)
    async def ask(ctx: Context, case: str) -> str:
        client = _async_openai(servers[case])
        model = agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        agent = agents.Agent(name="asker", instructions="Answer.", model=model)
        return str((await run_agent(ctx, agent, "Say done.")).final_output)

    return ask


def pydantic_ai_task(app: Cairn, servers: Servers) -> TaskDef[..., Any]:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from cairn.integrations.pydantic_ai import CairnDurability

    @app.task(name="ask", retry=None)
    async def ask(ctx: Context, case: str) -> str:
        provider = OpenAIProvider(openai_client=_async_openai(servers[case]))
        model = OpenAIChatModel(MODEL, provider=provider)
        agent = pydantic_ai.Agent(model, name="asker", capabilities=[CairnDurability()])
        return str((await agent.run("Say done.")).output)

    return ask


SDKS: dict[str, Make] = {
    "openai": openai_task,
    "anthropic": anthropic_task,
    "agents-sdk": agents_sdk_task,
    "pydantic-ai": pydantic_ai_task,
}


# -- where the secrets could have gone -------------------------------------------------------------
@contextmanager
def _refusing_servers() -> Iterator[Servers]:
    """One model server per case, each answering every request with that case's refusal."""
    with ExitStack() as stack:
        servers: Servers = {}
        for status, shape in CASES:
            server = stack.enter_context(SimulatedModelServer(Scripted(["done"])))
            headers, message = _echo(shape)
            server.fail_next(100, status, headers=headers, message=message)
            servers[f"{status}-{shape}"] = server
        yield servers


@contextmanager
def _json_log() -> Iterator[io.StringIO]:
    """Every record (the SDKs' own debug lines too) as cairn's JSON log writes it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _stored_bytes(store_url: str, root: Path) -> bytes:
    """Every byte of the store: the SQLite file, WAL and blobs, or every row of the
    PostgreSQL database as text; and every message's content unpacked (it may be
    compressed on disk)."""
    files = b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())
    if store_url.startswith("sqlite"):
        with sqlite3.connect(root / "cairn.db") as conn:
            contents = [row[0] for row in conn.execute("SELECT content FROM messages")]
        return files + b"".join(unpack_content(c).encode() for c in contents)
    return files + _postgres_rows(store_url.split("?", 1)[0])


def _postgres_rows(url: str) -> bytes:
    found: list[bytes] = []
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t').fetchall()
            found += [row[0].encode() for row in rows]
            if table == "messages":
                packed = conn.execute(f'SELECT content FROM "{schema}".messages').fetchall()
                found += [unpack_content(row[0]).encode() for row in packed]
    return b"\n".join(found)


def _forms(secret: str) -> tuple[str, ...]:
    return (secret, masked(secret), secret[:8] + "*" * 4)


def _leaks(where: str, data: bytes) -> list[str]:
    return [f"{form!r} in {where}" for s in SECRETS for form in _forms(s) if form.encode() in data]


# -- the test ----------------------------------------------------------------------------------
@pytest.mark.parametrize("sdk", sorted(SDKS))
def test_no_secret_in_the_store_logs_spans_alerts_or_export(
    store_url: str,
    tmp_path: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    sdk: str,
) -> None:
    """Every case (401, 403 and 500, the secrets echoed as JSON, in headers and in a
    repr, masked too) fails its task, and no secret nor a masked form of one is in
    the store, the log, the spans, the alert or the export; the redaction mark is."""
    monkeypatch.setenv(ENV_NAME, ENV_SECRET)
    app = Cairn(store_url, clock=clock, blobs=str(tmp_path / "blobs"), secrets=[REGISTERED])
    export = tmp_path / "batch.jsonl"
    with (
        _refusing_servers() as servers,
        OtlpReceiver() as otlp,
        WebhookServer() as webhook,
        _json_log() as log,
    ):
        provider = trace_live(app, endpoint=otlp.url)
        task = SDKS[sdk](app, servers)
        report = app.run_batch(BATCH, task, [{"case": case} for case in servers], concurrency=1)
        provider.shutdown()
        assert report.failed == len(CASES), report
        refusal = " / ".join(_echo(shape)[1] for shape in SHAPES)
        alert = app.task(name="alert")(_alert(webhook.url, refusal))
        app.run(alert, task_id="alert")
        logging.getLogger("tests").error("the model server said: %s", refusal)
        with export.open("w", encoding="utf-8") as out:
            export_batch(app.store, app.blobs, BATCH, out)
        app.close()
    outputs = {
        "the store": _stored_bytes(store_url, tmp_path),
        "the log": log.getvalue().encode(),
        "the spans": b"".join(otlp.bodies),
        "the alert": b"".join(post.body for post in webhook.posts),
        "the export": export.read_bytes(),
    }
    leaks = [leak for where, data in outputs.items() for leak in _leaks(where, data)]
    assert not leaks, leaks
    for where in ("the store", "the log", "the alert", "the export"):
        assert REDACTED.encode() in outputs[where], where
    assert outputs["the spans"], "no span arrived"


def _alert(url: str, text: str) -> Callable[[Context], None]:
    """A task that posts an alert quoting ``text`` through the generic webhook notifier."""

    def alert(ctx: Context) -> None:
        message = Message("failure", f"batch {BATCH} failed: {text}", {"error": text})
        WebhookNotifier(url).send(ctx, "alert", message)

    return alert
