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
from cairn.engine.once import OnDoubt, resolve_command
from cairn.errors import ConfigurationError, Permanent
from cairn.retry import Retry

if TYPE_CHECKING:
    import httpx

SCOPE = "notify"  # the operation scope of every post_once key
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


def _may_have_arrived(client: Any, error: Exception) -> bool:
    """False for an error raised before the request left this machine (no
    connection, no pooled slot, a proxy that refused it); True for one after,
    such as no answer in time or a connection dropped while waiting for it."""
    never_sent = (
        client.ConnectError,
        client.ConnectTimeout,
        client.PoolTimeout,
        client.ProxyError,
        client.UnsupportedProtocol,
        client.LocalProtocolError,
    )
    return not isinstance(error, never_sent)


def _answer_lost(key: str, error: Exception) -> Permanent:
    """The post left, and its answer did not come: it may be in the channel. A
    webhook that neither dedupes nor can be asked must not get it again."""
    return Permanent(
        f"the webhook may have received the post under key {key!r} ({type(error).__name__}: "
        f"{error}): its answer was lost after the post was sent, so it is not sent again. "
        f"Look in the channel, then run `{resolve_command(key, SCOPE)} --result "
        """'{"status": 200, "reply": "ok"}'` if it is there, or `--retry` if it is not. """
        "Pass on_doubt='retry' for a receiver that honours Idempotency-Key."
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
    honour it. Transient answers (5xx, 429) and network errors before the post
    left are retried with the same key; other 4xx answers fail at once. A post
    whose answer was lost after it left (no answer in time, the connection
    dropped) may be in the channel: under ``on_doubt="raise"`` it fails the key
    for good, for a person to settle, and with ``on_doubt="retry"`` (a receiver
    that dedupes) it is retried.
    """
    if (text is None) == (payload is None):
        raise ValueError("post_once needs exactly one of text= or payload=")
    body = dict(payload) if payload is not None else {"text": text}

    def send(op_key: str) -> dict[str, Any]:
        client = _httpx()
        try:
            response = client.post(
                url,
                json=body,
                headers={"Idempotency-Key": op_key, **(headers or {})},
                timeout=timeout,
            )
        except client.TransportError as exc:
            if on_doubt == "raise" and _may_have_arrived(client, exc):
                raise _answer_lost(op_key, exc) from exc
            raise
        _check(response)
        return {"status": response.status_code, "reply": response.text[:200]}

    result: dict[str, Any] = ctx.once(key, send, scope=SCOPE, on_doubt=on_doubt, retry=retry)
    return result
