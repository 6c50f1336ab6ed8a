"""Where alerts go: a Slack-compatible chat webhook, a generic JSON webhook, a log.

A notifier sends inside a cairn task, through ``ctx.once`` with the key it is
given, so each message is posted at most once per key even if the sender is
killed and started again. HTTP notifiers need httpx (``cairn-durable[notify]``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from cairn.context import Context
from cairn.observe.slack import payload
from cairn.redaction import redact
from cairn.webhook import post_once

log = logging.getLogger("cairn.observe")


@dataclass(frozen=True)
class Message:
    """One alert: ``kind`` is "stall", "recovered", "budget" or "report"; ``text`` is for
    people (``title`` its headline), ``fields`` for machines (the generic
    webhook's JSON, documented in docs/observability.md)."""

    kind: str
    text: str
    fields: dict[str, Any]
    title: str = "cairn"

    def __post_init__(self) -> None:
        # Redacted as it is made, so that no notifier can send a secret
        # (cairn.redaction): an alert quotes errors and names.
        object.__setattr__(self, "text", redact(self.text))
        object.__setattr__(self, "title", redact(self.title))
        object.__setattr__(self, "fields", _redacted(self.fields))

    @property
    def link(self) -> str | None:
        """The dashboard page of the message's subject, when a dashboard is configured."""
        url = self.fields.get("dashboard_url")
        return str(url) if url else None


class Notifier(Protocol):
    """Sends a message at most once per ``key`` (inside a cairn task)."""

    @property
    def name(self) -> str:
        """Distinguishes this notifier's keys from the others'."""
        ...

    def send(self, ctx: Context, key: str, message: Message) -> None: ...


@dataclass(frozen=True)
class SlackNotifier:
    """A Slack incoming webhook: escaped ``text`` and Block Kit ``blocks``
    (``cairn.observe.slack``). Mattermost and Rocket.Chat read the ``text``."""

    url: str
    name: str = "slack"

    def send(self, ctx: Context, key: str, message: Message) -> None:
        post_once(ctx, key, self.url, payload=payload(message.title, message.text, message.link))


@dataclass(frozen=True)
class WebhookNotifier:
    """Any HTTP endpoint: POSTs ``{"kind", "text", **fields}`` as JSON (the
    fields of each kind are listed in docs/observability.md)."""

    url: str
    name: str = "webhook"

    def send(self, ctx: Context, key: str, message: Message) -> None:
        payload = {"kind": message.kind, "text": message.text, **message.fields}
        post_once(ctx, key, self.url, payload=payload)


@dataclass(frozen=True)
class LogNotifier:
    """Writes the message to the ``cairn.observe`` logger (once per key too)."""

    name: str = "log"

    def send(self, ctx: Context, key: str, message: Message) -> None:
        def write(_key: str) -> None:
            log.warning("%s", message.text)

        ctx.once(key, write, scope="notify")


def _redacted(value: Any) -> Any:
    """``value`` with every text in it redacted (through lists and dicts)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


def notifiers_for(
    *, slack: list[str] | None = None, webhook: list[str] | None = None, log_too: bool = True
) -> list[Notifier]:
    """Notifiers from command-line URLs; each URL gets its own name (and keys)."""
    found: list[Notifier] = [LogNotifier()] if log_too else []
    found += [SlackNotifier(url, f"slack{i}") for i, url in enumerate(slack or [])]
    found += [WebhookNotifier(url, f"webhook{i}") for i, url in enumerate(webhook or [])]
    return found
