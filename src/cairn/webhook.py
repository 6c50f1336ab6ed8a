"""Post a chat message at most once per key: the daily-report case.

``post_once`` sends Slack-compatible JSON (``{"text": ...}``) to a webhook
through httpx (``pip install 'cairn-durable[notify]'``), guarded by an operation key
such as ``op_key("daily-report", day)``: rerunning the whole pipeline never posts
the same report twice. The webhook URL is not recorded (it is a secret); the
record holds the key, the HTTP status and the start of the reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.context import Context
from cairn.engine.once import OnDoubt
from cairn.errors import ConfigurationError, Permanent
from cairn.retry import Retry

if TYPE_CHECKING:
    import httpx

NOTIFY_RETRY = Retry(attempts=3, initial_delay=2.0, backoff=2.0, max_delay=30.0)


class WebhookError(Exception):
    """The webhook answered with an error that may pass (5xx, 429)."""


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise ConfigurationError(
            "cairn.webhook needs httpx: pip install 'cairn-durable[notify]'"
        ) from exc
    return httpx


def _check(response: httpx.Response) -> None:
    if response.status_code == 429 or response.status_code >= 500:
        raise WebhookError(f"webhook answered {response.status_code}: {response.text[:200]}")
    if response.status_code >= 400:
        raise Permanent(
            f"webhook answered {response.status_code}: {response.text[:200]}; check the "
            "URL and the message format"
        )


def post_once(
    ctx: Context,
    key: str,
    url: str,
    text: str | None = None,
    *,
    payload: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    on_doubt: OnDoubt = "raise",
    retry: Retry = NOTIFY_RETRY,
) -> dict[str, Any]:
    """Post ``text`` (or a full JSON ``payload``) to ``url`` at most once per ``key``.

    The key is also sent as the ``Idempotency-Key`` header, for receivers that
    honour it. Transient answers (5xx, 429, network errors) are retried with the
    same key; other 4xx answers fail at once.
    """
    if (text is None) == (payload is None):
        raise ValueError("post_once needs exactly one of text= or payload=")
    body = dict(payload) if payload is not None else {"text": text}

    def send(op_key: str) -> dict[str, Any]:
        client = _httpx()
        response = client.post(
            url,
            json=body,
            headers={"Idempotency-Key": op_key, **(headers or {})},
            timeout=timeout,
        )
        _check(response)
        return {"status": response.status_code, "reply": response.text[:200]}

    result: dict[str, Any] = ctx.once(key, send, scope="notify", on_doubt=on_doubt, retry=retry)
    return result
