"""A model server that answers HTTP 200 with something that is not a completion
(a proxy's page, a body cut short, no choices, a choice without a message, an
error object in its place): the call fails with ``MalformedAnswer``, naming the
provider, the model and what was wrong, redacted, and a ``Transient`` that the
call's retry policy sends again; through the real openai and anthropic SDKs
against the local model server, which counts every request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cairn import Cairn, Context, MalformedAnswer, Retry, TaskFailed, Transient
from cairn.agent import LLMSummarizer, user
from cairn.agent.providers import provider_for
from cairn.retry import NO_RETRY
from tests.agent_server import API_KEY, Scripted, anthropic_client, model_server, openai_client

PAGE = f"<html><body><h1>502 Bad Gateway</h1><p>upstream key {API_KEY}</p></body></html>"
# (the body, its content type, what the error says is wrong), for each API.
ANSWERS: dict[str, tuple[Any, str, str]] = {
    "a proxy's page": (PAGE, "text/html", "the body is not JSON: <html>"),
    "a body cut short": (
        '{"id": "x", "choices": [{"ind',
        "application/json",
        "is not JSON (Unterminated",
    ),
    "no choices": ({"id": "x", "object": "chat.completion"}, "application/json", "no choices"),
    "empty choices": ({"id": "x", "choices": []}, "application/json", "an empty list of choices"),
    "no message": (
        {"id": "x", "choices": [{"index": 0, "finish_reason": "stop"}]},
        "application/json",
        "its first choice has no message",
    ),
    "an error object": (
        {"error": {"message": "upstream overloaded", "code": 502}},
        "application/json",
        'it carries an error in place of the completion: {"message": "upstream overloaded"',
    ),
}
# Anthropic's messages say the same in their own words where their shape differs.
ANTHROPIC_SAYS = {
    "no choices": "it has no content",
    "empty choices": "it has no content",
    "no message": "it has no content",
    "an error object": "it carries an error in place of the message",
}


def _ask(app: Cairn, client: Any, retry: Retry) -> Any:
    @app.task(name="ask", retry=NO_RETRY)
    def ask(ctx: Context) -> str:
        reply = ctx.llm_call([user("hello?")], model="gpt-4o-mini", client=client, retry=retry)
        return str(reply.content)

    return ask


def _client(api: str, server: Any) -> Any:
    return openai_client(server) if api == "openai" else anthropic_client(server)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("case", list(ANSWERS))
def test_a_200_that_is_not_a_completion_fails_the_call_by_name(
    app: Cairn, api: str, case: str
) -> None:
    """With no retry, the one request fails the task with MalformedAnswer: the
    provider, the model and what was wrong, the key the page echoed redacted
    (it was an AttributeError, an IndexError, a TypeError or a JSONDecodeError)."""
    body, content_type, says = ANSWERS[case]
    if api == "anthropic":
        says = ANTHROPIC_SAYS.get(case, says)
    with model_server(Scripted(["fine."])) as server:
        server.answer_next(1, body, content_type=content_type)
        with pytest.raises(TaskFailed) as failed:
            app.run(_ask(app, _client(api, server), Retry(attempts=1)), task_id="t")
        assert server.requests == 1
    stored = app.store.get_task("t")
    assert stored is not None
    error = json.loads(str(stored.error))
    assert error["type"] == "cairn.errors.MalformedAnswer"
    text = error["message"]
    what = "a chat completion" if api == "openai" else "a message"
    assert text.startswith(
        f"{api} answered a request for model 'gpt-4o-mini' with HTTP 200 but not {what}: "
    )
    assert says in text
    assert API_KEY not in str(stored.error)
    assert "MalformedAnswer" in str(failed.value)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_malformed_answer_is_transient_and_sent_again(app: Cairn, api: str) -> None:
    """A proxy's page once, then the model's answer: the call's retry policy
    sends the request again (two requests), and the task has the answer."""
    with model_server(Scripted(["fine."])) as server:
        server.answer_next(1, PAGE, content_type="text/html")
        retry = Retry(attempts=2, initial_delay=0.0, jitter=0.0)
        assert app.run(_ask(app, _client(api, server), retry), task_id="t") == "fine."
        assert server.requests == 2
        assert server.bodies[0] == server.bodies[1]


def test_the_error_is_cairns_transient_with_what_was_wrong() -> None:
    """Raised by the provider itself: a MalformedAnswer (a Transient) carrying
    the provider, the model and the problem, and nothing chained (no SDK or
    JSON error whose text could hold the body's secrets)."""
    with model_server(Scripted(["fine."])) as server:
        server.answer_next(1, '{"choices": [', content_type="application/json")
        provider = provider_for(openai_client(server))
        with pytest.raises(MalformedAnswer) as raised:
            provider.complete([user("hi")], model="m", tools=None, params={})
    error = raised.value
    assert isinstance(error, Transient)
    assert (error.provider, error.model) == ("openai", "m")
    assert error.problem.startswith("the body is not JSON (Expecting value at character 13)")
    assert error.__cause__ is None
    assert error.__suppress_context__


def test_a_summarizer_answered_with_a_page_fails_the_compaction_by_name(app: Cairn) -> None:
    """The summarizer's server answers a proxy's page: the compaction fails and
    replaces nothing, and what it records says the provider, the model and that
    the body was not JSON, with the key redacted."""
    with model_server(Scripted(["Goal: read."])) as server:
        summarizer = LLMSummarizer(openai_client(server), model="s", max_tokens=100)
        server.answer_next(1, PAGE, content_type="text/html")

        @app.task(name="notes")
        def notes(ctx: Context) -> dict[str, Any]:
            conv = ctx.conversation("main", threshold=1000, keep_tail=200, summarizer=summarizer)
            for i in range(8):
                conv.append(user(f"note {i}: " + "the data says something. " * 20))
            done = conv.compact()
            return {"ok": done.ok, "error": done.error, "summary": conv.summary}

        result = app.run(notes, task_id="n")
        assert server.requests == 1
    assert (result["ok"], result["summary"]) == (False, None)
    assert result["error"].startswith("MalformedAnswer: openai answered a request for model 's'")
    assert "the body is not JSON: <html>" in result["error"]
    assert API_KEY not in result["error"]
