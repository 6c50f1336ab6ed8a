"""A provider's errors, through the real openai and anthropic SDKs against the
local model server: a 429 waits what the provider asked, 401/403 are not
retried, and no key an error echoes reaches the store's files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

import openai
import pytest

from cairn import Cairn, Context, Retry, TaskFailed
from cairn.agent import LLMSummarizer, tool_result, user
from cairn.agent.provider_errors import REDACTED, redact
from cairn.agent.providers import provider_for
from cairn.clock import FakeClock
from cairn.engine.errortext import ERROR_TEXT_LIMIT
from cairn.errors import Permanent, RetryAfter, Transient
from tests.agent_server import API_KEY, Scripted, anthropic_client, model_server, openai_client


@dataclass(frozen=True, kw_only=True)
class RecordingRetry(Retry):
    """A retry policy that notes every wait it decides, where cairn asks it."""

    decided: list[tuple[str, float | None]] = field(default_factory=list, compare=False)

    def deferral(self, error: BaseException, deferred: float) -> float | None:
        seconds = super().deferral(error, deferred)
        self.decided.append(("deferral", seconds))
        return seconds

    def delay(self, attempts_made: int, *, rng: Random | None = None) -> float:
        seconds = super().delay(attempts_made, rng=rng)
        self.decided.append(("delay", seconds))
        return seconds


def _ask(app: Cairn, client: Any, retry: Retry) -> Any:
    @app.task(name="ask", retry=None)
    def ask(ctx: Context) -> str:
        reply = ctx.llm_call([user("hello?")], model="gpt-4o-mini", client=client, retry=retry)
        return str(reply.content)

    return ask


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_429_waits_the_seconds_the_provider_asked(app: Cairn, clock: FakeClock, sdk: str) -> None:
    """A 429 with Retry-After: 3 is waited out for 3 s (not the policy's 0.2 s),
    without spending an attempt, and the second request succeeds."""
    retry = RecordingRetry(attempts=3, initial_delay=0.2, jitter=0.0)
    with model_server(Scripted(["fine."])) as server:
        client = openai_client(server) if sdk == "openai" else anthropic_client(server)
        server.fail_next(1, 429, headers={"Retry-After": "3"}, message="slow down")
        assert app.run(_ask(app, client, retry), task_id="t") == "fine."
        assert server.requests == 2
    assert retry.decided == [("deferral", 3.0)]
    assert 3.0 in clock.slept


def test_retry_after_ms_wins_over_retry_after(app: Cairn, clock: FakeClock) -> None:
    """``retry-after-ms`` (which the SDKs themselves read first) is honoured over
    the coarser ``Retry-After``."""
    retry = RecordingRetry(attempts=1)
    with model_server(Scripted(["fine."])) as server:
        headers = {"Retry-After": "9", "retry-after-ms": "1500"}
        server.fail_next(1, 429, headers=headers)
        assert app.run(_ask(app, openai_client(server), retry), task_id="t") == "fine."
    assert retry.decided == [("deferral", 1.5)]


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_authentication_and_permission_errors_are_not_retried(
    app: Cairn, status: int, sdk: str
) -> None:
    """A 401 or 403 fails the call at once even under a policy of five attempts:
    one request reaches the server, and the error is a Permanent naming the SDK's class."""
    retry = RecordingRetry(attempts=5, initial_delay=0.2)
    with model_server(Scripted(["unreachable"])) as server:
        client = openai_client(server) if sdk == "openai" else anthropic_client(server)
        server.fail_next(1, status, message="no access")
        refused = r"AuthenticationError|PermissionDeniedError"
        with pytest.raises(TaskFailed, match=refused) as failed:
            app.run(_ask(app, client, retry), task_id="t")
        assert server.requests == 1
    assert retry.decided == [("deferral", None)]
    assert failed.value.error["type"] == "cairn.errors.Permanent"


def _every_byte(root: Path) -> list[tuple[Path, bytes]]:
    return [(path, path.read_bytes()) for path in sorted(root.rglob("*")) if path.is_file()]


def test_a_key_echoed_in_an_error_is_not_stored(tmp_path: Path, clock: FakeClock) -> None:
    """The server's error text echoes the configured key (one that looks like no
    known key format), an ``sk-ant-`` key and a Bearer token; after the retried
    failures, a failed summarizer call and the final 401, none of them is in the
    SQLite file, its WAL or the blob folder, while the redaction mark is."""
    own_key = "local-proxy-key-7f3a9c0d21"
    leaked = f"key {own_key} / sk-ant-api03-abcdefGHIJ / Bearer tok.en-1234567890 rejected"
    app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", clock=clock, inline_limit=256)
    with model_server(Scripted(["ok"])) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=own_key, max_retries=0)
        summarizer = LLMSummarizer(client, model="gpt-4o-mini")

        @app.task(name="leak", retry=None)
        def leak(ctx: Context) -> str:
            conv = ctx.conversation("c", threshold=50, keep_tail=10, summarizer=summarizer)
            conv.append(user("x " * 200))  # offloaded to the blob folder
            conv.append(tool_result("t1", "y " * 200))
            server.fail_next(1, 500, message=leaked)  # the summarizer's call fails
            conv.compact()
            server.fail_next(2, 500, message=leaked)
            server.fail_next(1, 401, message=leaked)
            ctx.llm_call([user("hi")], model="m", client=client, retry=Retry(attempts=3))
            return "unreachable"

        with pytest.raises(TaskFailed, match="AuthenticationError"):
            app.run(leak, task_id="k")
        assert server.requests == 4
        stored = _every_byte(tmp_path)
        app.close()
    stored += _every_byte(tmp_path)
    names = {path.name for path, _ in stored}
    assert "cairn.db-wal" in names
    assert any(
        path.parent.name == "cairn.db-blobs" or "cairn.db-blobs" in path.parts for path, _ in stored
    )
    everything = b"".join(data for _, data in stored)
    for secret in (own_key, "sk-ant-api03-abcdefGHIJ", "tok.en-1234567890", API_KEY):
        assert secret.encode() not in everything, secret
    assert REDACTED.encode() in everything


def test_a_megabyte_provider_error_is_stored_redacted_and_cut(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A 401 whose text echoes the configured key at its start and at its end,
    around a megabyte: the task ends failed; its recorded error is at most
    ERROR_TEXT_LIMIT bytes and keeps its start with the key redacted and a line
    saying how much was cut; no copy of the key is in the store's files."""
    own_key = "local-proxy-key-7f3a9c0d21"
    echoed = f"key {own_key} rejected; " + "z" * 1_000_000 + f" (key {own_key})"
    app = Cairn(f"sqlite:///{tmp_path / 'cairn.db'}", clock=clock)
    with model_server(Scripted(["ok"])) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key=own_key, max_retries=0)
        server.fail_next(1, 401, message=echoed)
        with pytest.raises(TaskFailed, match="AuthenticationError"):
            app.run(_ask(app, client, Retry(attempts=1)), task_id="k")
    record = app.store.get_task("k")
    app.close()
    assert record is not None
    assert record.status == "failed"
    assert record.error is not None
    assert len(record.error.encode("utf-8")) <= ERROR_TEXT_LIMIT
    message = json.loads(record.error)["message"]
    assert f"key {REDACTED} rejected; zzz" in message
    assert "characters here: a recorded error is kept to 64 KiB" in message
    everything = b"".join(data for _, data in _every_byte(tmp_path))
    assert own_key.encode() not in everything


def test_redact_removes_key_shapes_and_configured_secrets() -> None:
    """redact() cuts OpenAI and Anthropic key shapes, a Bearer token (the scheme
    stays) and given secrets, and leaves ordinary text (and too-short secrets)
    alone."""
    text = "sk-proj-AbC123xyz9 and sk-ant-api03-Zz_9 and Bearer abc.def and MYSECRET-42 ok"
    out = redact(text, ["MYSECRET-42", "ok"])
    assert out == f"{REDACTED} and {REDACTED} and Bearer {REDACTED} and {REDACTED} ok"


def _raised(client: Any) -> BaseException:
    provider = provider_for(client)
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the class is what is checked
        provider.complete([user("hi")], model="m", tools=None, params={})
    return raised.value


def test_sdk_errors_map_to_cairns_classes() -> None:
    """Raised by the openai SDK against the local server: a 429 without a header
    waits the default second, a 503 with Retry-After that many seconds, 500/408
    are Transient, 400/404 Permanent, a refused connection Transient; the SDK's
    error stays attached but is not chained (no traceback carries its text)."""
    with model_server(Scripted(["ok"])) as server:
        client = openai_client(server)
        server.fail_next(1, 429)
        limited = _raised(client)
        assert isinstance(limited, RetryAfter)
        assert limited.seconds == 1.0
        server.fail_next(1, 503, headers={"Retry-After": "7"})
        busy = _raised(client)
        assert isinstance(busy, RetryAfter)
        assert busy.seconds == 7.0
        for status, kind in (
            (500, Transient),
            (408, Transient),
            (400, Permanent),
            (404, Permanent),
        ):
            server.fail_next(1, status)
            mapped = _raised(client)
            assert isinstance(mapped, kind), status
            assert isinstance(vars(mapped)["provider_error"], openai.APIStatusError)
            assert mapped.__cause__ is None
            assert mapped.__suppress_context__
        port = server._httpd.server_address[1] if server._httpd else 0
    refused = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0)
    assert isinstance(_raised(refused), Transient)


def test_a_summarizer_error_that_echoes_a_key_is_recorded_redacted(app: Cairn) -> None:
    """Any summarizer's error text (not only the SDKs') is redacted before the
    failed compaction is recorded, and before a fallback records it as its
    reason (the context over its bound, cairn.agent.fallback)."""

    def leaky(request: Any) -> str:
        raise RuntimeError("upstream refused key sk-live-0123456789abcdef")

    @app.task(name="c")
    def compact(ctx: Context, bound: int) -> str | None:
        conv = ctx.conversation(
            "c", threshold=50, keep_tail=10, summarizer=leaky, max_context=bound
        )
        for i in range(6):
            conv.append(user(f"message {i} " + "words " * 20))
        done = conv.compact()
        row = conv.row_at(done.idx) if done.ok else None
        return done.error if row is None else str((row.meta or {})["fallback_reason"])

    expected = f"RuntimeError: upstream refused key {REDACTED}"
    assert app.run(compact, task_id="c", bound=100_000) == expected
    assert app.run(compact, task_id="f", bound=100) == expected
